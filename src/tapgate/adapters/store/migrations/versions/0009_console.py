"""The person's console: its sign-ins and sessions.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_TABLES = ("console_sign_ins", "console_sessions")


def _user_key() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "console_sign_ins",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("sign_in_id", sa.String(16), primary_key=True),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("user_id", sa.String(40)),
        sa.Column("approval_id", sa.String(40)),
        sa.Column("browser", sa.String(80), nullable=False),
        _user_key(),
    )
    op.create_table(
        "console_sessions",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("session_id", sa.String(16), primary_key=True),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("via", sa.String(10), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("browser", sa.String(80), nullable=False),
        sa.Column("revoked_at", UtcDateTime),
        _user_key(),
    )
    op.create_index("console_sessions_user", "console_sessions", ["tenant_id", "user_id"])
    for table in _TABLES:
        protect(table)


def downgrade() -> None:
    for table in reversed(_TABLES):
        op.drop_table(table)
