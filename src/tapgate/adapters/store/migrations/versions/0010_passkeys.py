"""Passkeys: each device's WebAuthn credentials, and the users who must verify themselves.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_TABLES = ("passkeys", "passkey_users")


def upgrade() -> None:
    op.create_table(
        "passkeys",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("credential_id", sa.String(1400), primary_key=True),
        sa.Column("device_uid", sa.String(16), nullable=False),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("public_key", sa.Text, nullable=False),
        sa.Column("sign_count", sa.BigInteger, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
        ),
    )
    op.create_index("passkeys_device", "passkeys", ["tenant_id", "device_uid"])
    op.create_table(
        "passkey_users",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), primary_key=True),
        sa.Column("required", sa.Boolean, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"
        ),
    )
    for table in _TABLES:
        protect(table)


def downgrade() -> None:
    op.drop_table("passkey_users")
    op.drop_index("passkeys_device", "passkeys")
    op.drop_table("passkeys")
