"""token broker hash: what recreates an agent's broker user without its token

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 10:30:00

Written by hand. ``tokens.broker_hash`` is the SHA-256 (hex) of an agent
token's full text: the broker keeps it as the agent's ACL password
(``ACL SETUSER agent-NAME ... #<hash>``), so ``theow tokens sync`` can make a
user the broker lost again, and ``theow doctor`` can tell a user's password is
the token's. It opens no login: a login needs the token itself. Tokens made
before this revision have none (their users are refreshed, not recreated).
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("broker_hash", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("broker_hash")
