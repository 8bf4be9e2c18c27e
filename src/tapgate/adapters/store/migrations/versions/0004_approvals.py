"""Approvals, agent pauses ("this wasn't me"), and an invocation's reason and binding code.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TABLES = ("approvals", "agent_pauses")


def _user_key() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"
    )


def upgrade() -> None:
    with op.batch_alter_table("invocations") as batch:
        batch.add_column(sa.Column("reason", sa.Text))
        batch.add_column(sa.Column("binding_code", sa.String(8)))
        batch.add_column(sa.Column("approval_id", sa.String(40)))
    op.create_table(
        "approvals",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("approval_id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("agent_id", sa.String(40), nullable=False),
        sa.Column("invocation_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("subject", sa.String(24), nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("preview", sa.Text, nullable=False),
        sa.Column("sign_format", sa.String(40), nullable=False),
        sa.Column("challenge", sa.String(32), nullable=False),
        sa.Column("sign_expires_at", sa.BigInteger, nullable=False),
        sa.Column("action_sha256", sa.String(64), nullable=False),
        sa.Column("algorithms", sa.String(40), nullable=False),
        sa.Column("binding_code", sa.String(8), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("decided_at", UtcDateTime),
        sa.Column("decided_by", sa.String(80)),
        _user_key(),
        sa.ForeignKeyConstraint(
            ["tenant_id", "invocation_id"],
            ["invocations.tenant_id", "invocations.invocation_id"],
            ondelete="CASCADE",
        ),
    )
    op.create_index("approvals_user_status", "approvals", ["tenant_id", "user_id", "status"])
    op.create_table(
        "agent_pauses",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), primary_key=True),
        sa.Column("agent_id", sa.String(40), primary_key=True),
        sa.Column("until", UtcDateTime, nullable=False),
        _user_key(),
    )
    for table in _TABLES:
        protect(table)


def downgrade() -> None:
    for table in reversed(_TABLES):
        op.drop_table(table)
    with op.batch_alter_table("invocations") as batch:
        batch.drop_column("approval_id")
        batch.drop_column("binding_code")
        batch.drop_column("reason")
