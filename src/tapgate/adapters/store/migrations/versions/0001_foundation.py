"""Tenants, users, credentials and the audit journal.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TABLES = ("tenants", "users", "credentials", "audit_heads", "audit_entries")


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(80), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), primary_key=True),
        sa.Column("display_name", sa.String(80), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    )
    op.create_table(
        "credentials",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("credential_id", sa.String(16), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(200), nullable=False),
        sa.Column("user_id", sa.String(40)),
        sa.Column("agent_id", sa.String(40)),
        sa.Column("device_uid", sa.String(16)),
        sa.Column("require_device_signature", sa.Boolean),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("revoked_at", UtcDateTime),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"
        ),
    )
    op.create_table(
        "audit_heads",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    )
    op.create_table(
        "audit_entries",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("action", sa.String(60), nullable=False),
        sa.Column("actor", sa.String(120), nullable=False),
        sa.Column("outcome", sa.String(30), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    )
    for table in _TABLES:
        protect(table)
    if op.get_bind().dialect.name == "postgresql":
        # The one read across tenants the app may make: the list of tenant ids, for maintenance
        # commands such as `tapgate audit verify`. It runs as the migrating (admin) role.
        op.execute(
            "CREATE FUNCTION tapgate_tenant_ids() RETURNS SETOF text LANGUAGE sql STABLE "
            "SECURITY DEFINER SET search_path = pg_catalog, public "
            "AS $$ SELECT tenant_id::text FROM public.tenants ORDER BY tenant_id $$"
        )
        op.execute("REVOKE ALL ON FUNCTION tapgate_tenant_ids() FROM PUBLIC")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS tapgate_tenant_ids()")
    for table in reversed(_TABLES):
        op.drop_table(table)
