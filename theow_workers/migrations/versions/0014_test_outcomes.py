"""test_outcomes, test_reports: each test's outcome in the ledger's runs, kept cheaply

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 10:00:00

Written by hand. ``test_reports`` holds one row per run that came with a JUnit
report (``theow-client run --junit``): its counts (tests, failed, errors,
skipped, flaky, and those it did not list). ``test_outcomes`` holds one row per
test that did not simply pass a run: ``failed`` (it failed the run), ``flaky``
(it failed, then passed on a rerun within the run), ``passed-after-rerun`` (it
failed on this commit in an earlier run of the job, and this run passed it). A
passed test is no row: a run's report says its tests passed but the ones listed.
Both are keyed by the sending agent and the run's id, as ``runs`` is, and
purged with it (``theow runs purge``). The indexes answer ``theow tests``: a
job's outcomes in time (``repo, job, at``), a test's (``test, at``), a commit's
failed tests (``repo, job, sha``) and the purge (``at``).
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "test_reports",
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("repo", sa.String(300), nullable=False),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("tests", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("skipped", sa.Integer(), nullable=False),
        sa.Column("flaky", sa.Integer(), nullable=False),
        sa.Column("unlisted", sa.Integer(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("agent", "run_id"),
    )
    with op.batch_alter_table("test_reports") as batch:
        batch.create_index("ix_test_reports_repo_job_at", ["repo", "job", "at"])
        batch.create_index("ix_test_reports_at", ["at"])
    op.create_table(
        "test_outcomes",
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("test", sa.String(700), nullable=False),
        sa.Column("repo", sa.String(300), nullable=False),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("sha", sa.String(64), nullable=False),
        sa.Column("branch", sa.String(200), nullable=False),
        sa.Column("outcome", sa.String(24), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("message", sa.String(300), nullable=True),
        sa.PrimaryKeyConstraint("agent", "run_id", "test"),
    )
    with op.batch_alter_table("test_outcomes") as batch:
        batch.create_index("ix_test_outcomes_repo_job_at", ["repo", "job", "at"])
        batch.create_index("ix_test_outcomes_test_at", ["test", "at"])
        batch.create_index("ix_test_outcomes_repo_job_sha", ["repo", "job", "sha"])
        batch.create_index("ix_test_outcomes_at", ["at"])


def downgrade() -> None:
    with op.batch_alter_table("test_outcomes") as batch:
        for name in (
            "ix_test_outcomes_at",
            "ix_test_outcomes_repo_job_sha",
            "ix_test_outcomes_test_at",
            "ix_test_outcomes_repo_job_at",
        ):
            batch.drop_index(name)
    op.drop_table("test_outcomes")
    with op.batch_alter_table("test_reports") as batch:
        batch.drop_index("ix_test_reports_at")
        batch.drop_index("ix_test_reports_repo_job_at")
    op.drop_table("test_reports")
