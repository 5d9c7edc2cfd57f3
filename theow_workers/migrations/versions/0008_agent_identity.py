"""agent identity: failures record their verified agent; the token store

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 09:00:00

Written by hand. ``failures.agent`` is the agent whose signature a failure
carried and ``failures.idempotency_key`` the key it was sent with (a second
use of one key is noted as a conflict, never merged). Failures recorded
before this revision have neither. ``tokens`` is the token store: names,
scopes, the secret's lookup hash and signing key, never the secret.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("failures") as batch:
        batch.add_column(sa.Column("agent", sa.String(64), nullable=True))
        batch.add_column(sa.Column("idempotency_key", sa.String(200), nullable=True))
        batch.create_index("ix_failures_agent", ["agent"])
        batch.create_index("ix_failures_idempotency_key", ["idempotency_key"])
    op.create_table(
        "tokens",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("lookup_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("signing_key", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("tokens")
    with op.batch_alter_table("failures") as batch:
        batch.drop_index("ix_failures_idempotency_key")
        batch.drop_index("ix_failures_agent")
        batch.drop_column("idempotency_key")
        batch.drop_column("agent")
