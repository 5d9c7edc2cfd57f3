"""runs: the ledger of job runs, passed and failed, with where they ran

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29 12:50:00

Written by hand. ``runs`` holds one row per job run an agent, a webhook or a
replay reported (``theow_workers.store.runs``): where it ran (repository, job,
branch, sha, pull request and its base), its attempt, outcome and times; a
failed run its cause, category and failure. Keyed by the sending agent and the
run's id, so a redelivery records nothing twice and no agent writes another's
runs. Its indexes answer the classification's questions: a job's runs in time
(``repo, job, finished_at``), a cause's failures in time (``cause,
finished_at``), the runs of one commit (``repo, job, sha``) and the run of a
failure (``failure_id``). ``repositories`` keeps each repository's default
branch, as configured or as the forge's webhooks said.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("repo", sa.String(300), nullable=False),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("branch", sa.String(200), nullable=False),
        sa.Column("sha", sa.String(64), nullable=False),
        sa.Column("pr", sa.String(32), nullable=True),
        sa.Column("base_sha", sa.String(64), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("outcome", sa.String(8), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=False),
        sa.Column("cause", sa.String(500), nullable=True),
        sa.Column("category", sa.String(32), nullable=True),
        sa.Column("failure_id", sa.String(64), nullable=True),
        sa.Column("origin_then", sa.String(16), nullable=True),
        sa.Column("origin", sa.String(16), nullable=True),
        sa.Column("culprit", sa.String(64), nullable=True),
        sa.Column("fixed_by", sa.String(64), nullable=True),
        sa.Column("origin_reason", sa.Text(), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("agent", "id"),
    )
    with op.batch_alter_table("runs") as batch:
        batch.create_index("ix_runs_repo_job_finished", ["repo", "job", "finished_at"])
        batch.create_index("ix_runs_cause_finished", ["cause", "finished_at"])
        batch.create_index("ix_runs_repo_job_sha", ["repo", "job", "sha"])
        batch.create_index("ix_runs_failure_id", ["failure_id"])
        batch.create_index("ix_runs_finished_at", ["finished_at"])
    op.create_table(
        "repositories",
        sa.Column("repo", sa.String(300), nullable=False),
        sa.Column("default_branch", sa.String(200), nullable=False),
        sa.Column("learned_from", sa.String(16), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("repo"),
    )


def downgrade() -> None:
    op.drop_table("repositories")
    with op.batch_alter_table("runs") as batch:
        for name in (
            "ix_runs_finished_at",
            "ix_runs_failure_id",
            "ix_runs_repo_job_sha",
            "ix_runs_cause_finished",
            "ix_runs_repo_job_finished",
        ):
            batch.drop_index(name)
    op.drop_table("runs")
