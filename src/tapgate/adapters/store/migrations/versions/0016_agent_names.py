"""Agent tokens carry the agent's name, which the person's approval cards show as who asks.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("credentials") as batch:
        batch.add_column(sa.Column("agent_name", sa.String(40)))


def downgrade() -> None:
    with op.batch_alter_table("credentials") as batch:
        batch.drop_column("agent_name")
