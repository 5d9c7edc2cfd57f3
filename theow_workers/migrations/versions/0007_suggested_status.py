"""suggested: fixes that were offered but never ran are no longer stored as resolved

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 08:00:00

Written by hand; data only, no schema change. Before this revision a fix rule's
match was stored ``resolved`` whether or not its fix ran. Re-labelled here:

* a failure whose client-side fix still waits for its build agent (its rule's
  attempt ``client_pending``): ``suggested``;
* a dry-run replay's fix matches: the verdict and the replay item
  ``suggested``, the attempt (which ran nothing) ``suggested``;
* an executed replay counted each client-side fix it could not run as a
  failure of its rule: those counts are taken back out of ``rule_stats``.

What cannot be told from the rows stays as it was: a fix made only of
advice-giving actions (``suggests=True`` lives in code), and a client-side
fix an older agent reported before its re-run (``success``, and counted).
Downgrading leaves the labels: ``suggested`` reads as a status every
release since this one knows.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

failures = sa.table("failures", sa.column("id", sa.String), sa.column("source", sa.String))
attempts = sa.table(
    "attempts",
    sa.column("failure_id", sa.String),
    sa.column("rule", sa.String),
    sa.column("outcome", sa.String),
)
verdicts = sa.table(
    "verdicts",
    sa.column("failure_id", sa.String),
    sa.column("rule", sa.String),
    sa.column("status", sa.String),
    sa.column("mode", sa.String),
)
jobs = sa.table("replay_jobs", sa.column("id", sa.String), sa.column("dry_run", sa.Boolean))
items = sa.table(
    "replay_items",
    sa.column("job_id", sa.String),
    sa.column("failure_id", sa.String),
    sa.column("status", sa.String),
)
stats = sa.table("rule_stats", sa.column("rule", sa.String), sa.column("failures", sa.Integer))


def _dry_run_failures() -> sa.Select[tuple[str]]:
    """The ids of failures recorded by dry-run replays (source ``replay:<job id>``)."""
    dry_sources = sa.select(sa.literal("replay:") + jobs.c.id).where(jobs.c.dry_run.is_(True))
    return sa.select(failures.c.id).where(failures.c.source.in_(dry_sources))


def upgrade() -> None:
    waiting = sa.select(attempts.c.failure_id).where(
        attempts.c.failure_id == verdicts.c.failure_id,
        attempts.c.rule == verdicts.c.rule,
        attempts.c.outcome == "client_pending",
    )
    op.execute(
        verdicts.update()
        .where(verdicts.c.status == "resolved", sa.exists(waiting))
        .values(status="suggested")
    )

    dry = _dry_run_failures()
    op.execute(
        verdicts.update()
        .where(verdicts.c.status == "resolved", verdicts.c.failure_id.in_(dry))
        .values(status="suggested")
    )
    op.execute(
        attempts.update()
        .where(attempts.c.outcome == "success", attempts.c.failure_id.in_(dry))
        .values(outcome="suggested")
    )
    dry_jobs = sa.select(jobs.c.id).where(jobs.c.dry_run.is_(True))
    op.execute(
        items.update()
        .where(items.c.status == "resolved", items.c.job_id.in_(dry_jobs))
        .values(status="suggested")
    )

    # An executed replay's client_pending attempts were counted as failures of their rule.
    executed_sources = sa.select(sa.literal("replay:") + jobs.c.id).where(jobs.c.dry_run.is_(False))
    miscounted = (
        sa.select(sa.func.count())
        .select_from(attempts.join(failures, failures.c.id == attempts.c.failure_id))
        .where(
            attempts.c.rule == stats.c.rule,
            attempts.c.outcome == "client_pending",
            failures.c.source.in_(executed_sources),
        )
        .scalar_subquery()
    )
    op.execute(
        stats.update().values(
            failures=sa.case(
                (stats.c.failures > miscounted, stats.c.failures - miscounted), else_=0
            )
        )
    )


def downgrade() -> None:
    pass
