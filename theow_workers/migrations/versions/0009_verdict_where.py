"""the lines a verdict points at, and the wrapper that matched

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 11:10:00

Written by hand. ``verdicts.where_lines`` holds up to three ``{fact, line, text}``
(line numbers in the log the build printed), for every failure, matched or
not; ``verdicts.wrapper`` the wrapper rule that matched an ``unexplained``
failure. Verdicts recorded before this revision have neither: they read as
no lines and no wrapper.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("verdicts", sa.Column("where_lines", sa.JSON(), nullable=True))
    op.add_column("verdicts", sa.Column("wrapper", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("wrapper")
        batch.drop_column("where_lines")
