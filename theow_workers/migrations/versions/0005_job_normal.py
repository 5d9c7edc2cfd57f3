"""rules a verdict found on lines the job's passing runs print too

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 15:00:00

Written by hand. A verdict lists the validated rules whose evidence lines
are all in the job's normal (``seen_in_passing``): they ranked last. A
replay counts the passing runs its history carries (``replay_jobs.passing``).
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("verdicts", sa.Column("seen_in_passing", sa.JSON(), nullable=True))
    op.add_column(
        "replay_jobs", sa.Column("passing", sa.Integer(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    op.drop_column("replay_jobs", "passing")
    op.drop_column("verdicts", "seen_in_passing")
