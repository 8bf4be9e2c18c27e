"""Tokens have a life: an optional expiry and when each was last used (written at most once a minute).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.tables import UtcDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("credentials") as batch:
        batch.add_column(sa.Column("expires_at", UtcDateTime))
        batch.add_column(sa.Column("last_used_at", UtcDateTime))
    op.create_index("credentials_user", "credentials", ["tenant_id", "user_id"])


def downgrade() -> None:
    op.drop_index("credentials_user", "credentials")
    with op.batch_alter_table("credentials") as batch:
        batch.drop_column("last_used_at")
        batch.drop_column("expires_at")
