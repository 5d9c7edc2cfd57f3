"""explain: one row per explained cause, and the explanation stored with each verdict

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 15:10:00

Written by hand. ``explanations`` holds what the model answered for a cause
(``core.llm.explanation.cause_key``: the failure's fingerprint within its project),
so a cause is paid once even when Redis forgets; ``verdicts.explanation`` the
explanation a failure's verdict shows. Verdicts recorded before this revision
have none.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "explanations",
        sa.Column("cause", sa.String(64), primary_key=True),
        sa.Column("project", sa.String(200), nullable=False, server_default=""),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False, server_default=""),
        sa.Column("cause_class", sa.String(32), nullable=False, server_default=""),
        sa.Column("next_step", sa.Text(), nullable=False, server_default=""),
        sa.Column("model", sa.String(200), nullable=False, server_default=""),
        sa.Column("reason", sa.Text(), nullable=False, server_default=""),
        sa.Column("tokens_in", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("tokens_out", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cost", sa.Float(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_explanations_project", "explanations", ["project"])
    op.add_column("verdicts", sa.Column("explanation", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("explanation")
    op.drop_index("ix_explanations_project", table_name="explanations")
    op.drop_table("explanations")
