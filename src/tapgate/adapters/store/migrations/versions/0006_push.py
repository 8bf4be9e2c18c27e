"""The push outbox worker: each row's user (for the caps), its latest attempt, a notice's payload and
the last failure.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.tables import UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("push_outbox") as batch:
        batch.add_column(sa.Column("user_id", sa.String(40)))
        batch.add_column(sa.Column("pushed_at", UtcDateTime))
        batch.add_column(sa.Column("payload", sa.Text))
        batch.add_column(sa.Column("last_error", sa.String(200)))
    # The migrating role bypasses row-level security, so every tenant's rows are filled in.
    op.execute(
        "UPDATE push_outbox SET user_id = (SELECT d.user_id FROM devices d "
        "WHERE d.tenant_id = push_outbox.tenant_id AND d.device_uid = push_outbox.device_uid)"
    )
    with op.batch_alter_table("push_outbox") as batch:
        batch.alter_column("user_id", existing_type=sa.String(40), nullable=False)
    op.create_index("push_outbox_user_pushed", "push_outbox", ["tenant_id", "user_id", "pushed_at"])
    op.create_index("push_outbox_device_pushed", "push_outbox", ["tenant_id", "device_uid", "pushed_at"])


def downgrade() -> None:
    op.drop_index("push_outbox_device_pushed", "push_outbox")
    op.drop_index("push_outbox_user_pushed", "push_outbox")
    with op.batch_alter_table("push_outbox") as batch:
        batch.drop_column("last_error")
        batch.drop_column("payload")
        batch.drop_column("pushed_at")
        batch.drop_column("user_id")
