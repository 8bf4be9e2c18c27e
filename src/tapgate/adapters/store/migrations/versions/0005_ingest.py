"""Ingest receipts, the per-day ingest counters, and the triage session mapping.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TABLES = ("ingest_receipts", "ingest_counters", "triage_sessions")


def _device_key() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "ingest_receipts",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("device_uid", sa.String(16), primary_key=True),
        sa.Column("channel", sa.String(16), primary_key=True),
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("receipt_id", sa.String(40), nullable=False),
        sa.Column("received_at", UtcDateTime, nullable=False),
        sa.Column("accepted_at", UtcDateTime, nullable=False),
        sa.Column("session_id", sa.String(100), nullable=False),
        sa.Column("event_seq", sa.BigInteger, nullable=False),
        _device_key(),
    )
    op.create_table(
        "ingest_counters",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("device_uid", sa.String(16), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("count", sa.Integer, nullable=False),
        _device_key(),
    )
    op.create_table(
        "triage_sessions",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("device_uid", sa.String(16), primary_key=True),
        sa.Column("channel", sa.String(16), primary_key=True),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("session_id", sa.String(100), nullable=False),
        sa.Column("last_message_at", UtcDateTime, nullable=False),
        _device_key(),
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
