"""token repositories: the repositories an agent token may speak for

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29 09:40:00

Written by hand. ``tokens.repos`` is the JSON list of ``owner/name``
repositories given at ``theow tokens add NAME --repo owner/name``: a failure
of one of them is explained in that repository's scope, shared with the other
tokens allowed it; any other failure of the agent in the agent's own scope.
Tokens made before this revision have an empty list (their own scope only).
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("repos", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("repos")
