"""A gateway that moves: each tenant keeps the public_url its devices were last served under (and when
`serve --move` moved it), and a device paired by the browser app says so (its key lives on one origin).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.tables import UtcDateTime

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("served_url", sa.String(300)))
        batch.add_column(sa.Column("moved_at", UtcDateTime))
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("app", sa.String(16)))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("app")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("moved_at")
        batch.drop_column("served_url")
