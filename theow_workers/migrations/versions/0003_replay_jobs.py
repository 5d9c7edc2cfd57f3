"""replay jobs and items

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 01:00:00

Written by hand. Chained after 0002 (explorations and proposals): both were
written at the same time and one linear history keeps ``alembic upgrade head``
working.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replay_jobs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_key", sa.String(length=64), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("explore", sa.Boolean(), nullable=False),
        sa.Column("explore_budget", sa.Integer(), nullable=True),
        sa.Column("explore_status", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("rules", sa.JSON(), nullable=False),
        sa.Column("rules_version", sa.String(length=64), nullable=False),
        sa.Column("total", sa.Integer(), nullable=True),
        sa.Column("processed", sa.Integer(), nullable=False),
        sa.Column("matched", sa.Integer(), nullable=False),
        sa.Column("unmatched", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("invalid", sa.Integer(), nullable=False),
        sa.Column("duplicates", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_replay_jobs_source_key", "replay_jobs", ["source_key"])
    op.create_index("ix_replay_jobs_status", "replay_jobs", ["status"])
    op.create_table(
        "replay_items",
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("item_key", sa.String(length=64), nullable=False),
        sa.Column("line", sa.Integer(), nullable=True),
        sa.Column("failure_id", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("rule", sa.String(length=256), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("sample", sa.Text(), nullable=False),
        sa.Column("basis", sa.Text(), nullable=False),
        sa.Column("rules_version", sa.String(length=64), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["replay_jobs.id"]),
        # The primary key is the idempotency: one row per input per job, whatever redelivers it.
        sa.PrimaryKeyConstraint("job_id", "item_key"),
    )
    op.create_index("ix_replay_items_job_status", "replay_items", ["job_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_replay_items_job_status", table_name="replay_items")
    op.drop_table("replay_items")
    op.drop_index("ix_replay_jobs_status", table_name="replay_jobs")
    op.drop_index("ix_replay_jobs_source_key", table_name="replay_jobs")
    op.drop_table("replay_jobs")
