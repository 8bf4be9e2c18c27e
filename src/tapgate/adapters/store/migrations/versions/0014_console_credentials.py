"""Console sessions are credentials: a session remembers the device that signed it in and when it was last
used, an agent token made in the console names its session, and a sign-in keeps the address it came from
(and is found by its expiry, for the sweep that deletes it).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.tables import UtcDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("credentials") as batch:
        batch.add_column(sa.Column("console_session_id", sa.String(16)))
    with op.batch_alter_table("console_sign_ins") as batch:
        batch.add_column(sa.Column("address", sa.String(45), nullable=False, server_default=""))
        batch.add_column(sa.Column("approver_uid", sa.String(16)))
        batch.add_column(sa.Column("approver_id", sa.String(24)))
    op.create_index("console_sign_ins_expiry", "console_sign_ins", ["tenant_id", "expires_at"])
    with op.batch_alter_table("console_sessions") as batch:
        batch.add_column(sa.Column("approver_uid", sa.String(16)))
        batch.add_column(sa.Column("approver_id", sa.String(24)))
        batch.add_column(sa.Column("last_used_at", UtcDateTime))
    op.create_index("console_sessions_approver", "console_sessions", ["tenant_id", "approver_uid"])


def downgrade() -> None:
    op.drop_index("console_sessions_approver", "console_sessions")
    with op.batch_alter_table("console_sessions") as batch:
        batch.drop_column("last_used_at")
        batch.drop_column("approver_id")
        batch.drop_column("approver_uid")
    op.drop_index("console_sign_ins_expiry", "console_sign_ins")
    with op.batch_alter_table("console_sign_ins") as batch:
        batch.drop_column("approver_id")
        batch.drop_column("approver_uid")
        batch.drop_column("address")
    with op.batch_alter_table("credentials") as batch:
        batch.drop_column("console_session_id")
