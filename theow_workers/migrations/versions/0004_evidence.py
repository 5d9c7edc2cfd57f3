"""evidence on attempts and verdicts, and the other causes found

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 11:00:00

Written by hand. Every validated rule carries the line that made it match;
a verdict also lists the other rules that validated (``also``).
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("evidence", sa.JSON(), nullable=True))
    op.add_column("verdicts", sa.Column("evidence", sa.JSON(), nullable=True))
    op.add_column("verdicts", sa.Column("also", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("verdicts", "also")
    op.drop_column("verdicts", "evidence")
    op.drop_column("attempts", "evidence")
