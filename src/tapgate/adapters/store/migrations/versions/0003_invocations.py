"""Invocations, events, the push outbox; the event counter and live-link mark.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TABLES = ("invocations", "events", "push_outbox")


def _device_key() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    )


def upgrade() -> None:
    with op.batch_alter_table("audit_heads") as batch:
        batch.add_column(sa.Column("event_seq", sa.BigInteger, nullable=False, server_default="0"))
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("link_until", UtcDateTime))
    op.create_table(
        "invocations",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("invocation_id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("agent_id", sa.String(40), nullable=False),
        sa.Column("device_uid", sa.String(16), nullable=False),
        sa.Column("device_id", sa.String(24), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("capability", sa.String(30), nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("arguments_sha256", sa.String(64), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("session_id", sa.String(100)),
        sa.Column("run_id", sa.String(100)),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("delivered_at", UtcDateTime),
        sa.Column("resolved_at", UtcDateTime),
        sa.Column("message", sa.Text),
        sa.Column("late_status", sa.String(20)),
        sa.Column("late_message", sa.Text),
        sa.Column("late_at", UtcDateTime),
        _device_key(),
    )
    op.create_index(
        "invocations_device_status", "invocations", ["tenant_id", "device_uid", "status", "created_at"]
    )
    op.create_index("invocations_open_deadline", "invocations", ["status", "expires_at"])
    op.create_table(
        "events",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"
        ),
    )
    op.create_index("events_user_seq", "events", ["tenant_id", "user_id", "seq"])
    op.create_table(
        "push_outbox",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("delivery_id", sa.String(40), primary_key=True),
        sa.Column("device_uid", sa.String(16), nullable=False),
        sa.Column("event", sa.String(40), nullable=False),
        sa.Column("subject_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("not_before", UtcDateTime, nullable=False),
        sa.Column("claimed_until", UtcDateTime),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("finished_at", UtcDateTime),
        _device_key(),
    )
    op.create_index("push_outbox_due", "push_outbox", ["status", "not_before"])
    for table in _TABLES:
        protect(table)


def downgrade() -> None:
    for table in reversed(_TABLES):
        op.drop_table(table)
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("link_until")
    with op.batch_alter_table("audit_heads") as batch:
        batch.drop_column("event_seq")
