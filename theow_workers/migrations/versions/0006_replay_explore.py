"""replay explorations: one row per unmatched group a replay sent to the explorer

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 14:30:00

Written by hand. A row is written before its group's exploration is sent, so
a replay driver killed mid-exploration neither loses nor repeats one.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replay_explorations",
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("failure_id", sa.String(length=64), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("sample", sa.Text(), nullable=False),
        sa.Column("fingerprints", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reused_from", sa.String(length=64), nullable=True),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["replay_jobs.id"]),
        sa.PrimaryKeyConstraint("job_id", "failure_id"),
    )


def downgrade() -> None:
    op.drop_table("replay_explorations")
