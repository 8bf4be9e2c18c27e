"""Devices, their capabilities and grants, pairings, sessions and session messages.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TABLES = ("devices", "capabilities", "pairings", "sessions", "session_messages")


def _user_key() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"
    )


def _device_key() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "devices",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("device_uid", sa.String(16), primary_key=True),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("device_id", sa.String(24), nullable=False),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("alg", sa.String(16), nullable=False),
        sa.Column("public_key", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("push_kind", sa.String(24)),
        sa.Column("push_token", sa.Text),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("last_seen_at", UtcDateTime),
        sa.Column("revoked_at", UtcDateTime),
        _user_key(),
    )
    op.create_index(
        "devices_live_id",
        "devices",
        ["tenant_id", "user_id", "device_id"],
        unique=True,
        sqlite_where=sa.text("status != 'revoked'"),
        postgresql_where=sa.text("status != 'revoked'"),
    )
    op.create_table(
        "capabilities",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("device_uid", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(30), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("granted", sa.Boolean, nullable=False),
        _device_key(),
    )
    op.create_table(
        "pairings",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("pairing_id", sa.String(16), primary_key=True),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("code", sa.String(120)),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("device_uid", sa.String(16)),
        sa.Column("comparison_code", sa.String(6)),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("decided_at", UtcDateTime),
        _user_key(),
        _device_key(),
    )
    op.create_table(
        "sessions",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), primary_key=True),
        sa.Column("session_id", sa.String(100), primary_key=True),
        sa.Column("agent_id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("attended", sa.Boolean, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("latest_device_uid", sa.String(16)),
        sa.Column("latest_capabilities", sa.Text, nullable=False),
        sa.Column("phone_device_uid", sa.String(16)),
        _user_key(),
    )
    op.create_table(
        "session_messages",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), primary_key=True),
        sa.Column("session_id", sa.String(100), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("device_uid", sa.String(16)),
        sa.Column("capabilities", sa.Text, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "user_id", "session_id"],
            ["sessions.tenant_id", "sessions.user_id", "sessions.session_id"],
            ondelete="CASCADE",
        ),
    )
    for table in _TABLES:
        protect(table)


def downgrade() -> None:
    for table in reversed(_TABLES):
        op.drop_table(table)
