"""No tenant-wide lock: entries and events a writer could not number wait in ``audit_pending``
and ``events_pending`` until the holder of the tenant's chain head seals them. An ingest receipt no longer
names its event's number, which a writer that did not hold the head cannot know.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit_pending",
        sa.Column("key", _KEY, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.String(40), nullable=False),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("action", sa.String(60), nullable=False),
        sa.Column("actor", sa.String(120), nullable=False),
        sa.Column("outcome", sa.String(30), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    )
    op.create_index("audit_pending_tenant", "audit_pending", ["tenant_id", "key"])
    op.create_table(
        "events_pending",
        sa.Column("key", _KEY, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.String(40), nullable=False),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"
        ),
    )
    op.create_index("events_pending_tenant", "events_pending", ["tenant_id", "key"])
    for table in ("audit_pending", "events_pending"):
        protect(table)
    with op.batch_alter_table("ingest_receipts") as batch:
        batch.drop_column("event_seq")


def downgrade() -> None:
    with op.batch_alter_table("ingest_receipts") as batch:
        batch.add_column(sa.Column("event_seq", sa.BigInteger, nullable=False, server_default="0"))
    op.drop_index("events_pending_tenant", "events_pending")
    op.drop_table("events_pending")
    op.drop_index("audit_pending_tenant", "audit_pending")
    op.drop_table("audit_pending")
