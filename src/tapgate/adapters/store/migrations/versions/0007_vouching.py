"""Approvals that no call waits on (a new device's pairing, vouched for by a device the person has), and
the planned action's tool and exact arguments on every approval, so a phone recomputes what it signs.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.alter_column("invocation_id", existing_type=sa.String(64), nullable=True)
        batch.add_column(sa.Column("tool", sa.String(64)))
        batch.add_column(sa.Column("arguments", sa.Text))
    # The migrating role bypasses row-level security, so every tenant's rows are filled in.
    op.execute(
        "UPDATE approvals SET "
        "tool = (SELECT i.tool FROM invocations i WHERE i.tenant_id = approvals.tenant_id "
        "AND i.invocation_id = approvals.invocation_id), "
        "arguments = (SELECT i.arguments FROM invocations i WHERE i.tenant_id = approvals.tenant_id "
        "AND i.invocation_id = approvals.invocation_id)"
    )


def downgrade() -> None:
    op.execute("DELETE FROM approvals WHERE invocation_id IS NULL")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("arguments")
        batch.drop_column("tool")
        batch.alter_column("invocation_id", existing_type=sa.String(64), nullable=False)
