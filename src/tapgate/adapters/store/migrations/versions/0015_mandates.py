"""Standing mandates: the person's signed bounds for calls an agent may make without an approval each, and
the mandate a call was let through under.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mandates",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("mandate_id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), nullable=False),
        sa.Column("agent_id", sa.String(40)),
        sa.Column("tools", sa.Text, nullable=False),
        sa.Column("constraints", sa.Text, nullable=False),
        sa.Column("max_calls", sa.Integer, nullable=False),
        sa.Column("per_day", sa.Integer),
        sa.Column("purpose", sa.Text, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("sign_until", UtcDateTime, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("approval_id", sa.String(40)),
        sa.Column("used", sa.Integer, nullable=False),
        sa.Column("used_today", sa.Integer, nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("decided_at", UtcDateTime),
        sa.Column("decided_by", sa.String(200)),
        sa.ForeignKeyConstraint(
            ["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"
        ),
    )
    op.create_index("mandates_user", "mandates", ["tenant_id", "user_id", "status"])
    protect("mandates")
    with op.batch_alter_table("invocations") as batch:
        batch.add_column(sa.Column("mandate_id", sa.String(40)))


def downgrade() -> None:
    with op.batch_alter_table("invocations") as batch:
        batch.drop_column("mandate_id")
    op.drop_index("mandates_user", "mandates")
    op.drop_table("mandates")
