"""rules a verdict found on lines the job's passing runs print too

Revision ID: 0006
Revises: 0004
Create Date: 2026-11-23 15:00:00

Written by hand. A verdict lists the validated rules whose evidence lines
are all in the job's normal (``seen_in_passing``): they ranked last.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("verdicts", sa.Column("seen_in_passing", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("verdicts", "seen_in_passing")
