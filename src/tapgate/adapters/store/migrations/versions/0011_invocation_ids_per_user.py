"""An invocation id is its user's own: the key of a call is (tenant, id, user), so two people of one tenant
may choose the same id and neither learns of the other's call. An approval names its call by
the same three columns.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

OLD = ["tenant_id", "invocation_id"]
NEW = ["tenant_id", "invocation_id", "user_id"]
# SQLite's reflected constraints have no names; these name them so the copy can drop the old ones.
NAMES = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s", "pk": "pk_%(table_name)s"}


def _rekey(new: list[str]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("approvals_tenant_id_invocation_id_fkey", "approvals", type_="foreignkey")
        op.drop_constraint("invocations_pkey", "invocations", type_="primary")
        op.create_primary_key("invocations_pkey", "invocations", new)
        op.create_foreign_key(
            "approvals_tenant_id_invocation_id_fkey",
            "approvals",
            "invocations",
            new,
            new,
            ondelete="CASCADE",
        )
        return
    with op.batch_alter_table("invocations", recreate="always", naming_convention=NAMES) as batch:
        batch.drop_constraint("pk_invocations", type_="primary")
        batch.create_primary_key("pk_invocations", new)
    with op.batch_alter_table("approvals", recreate="always", naming_convention=NAMES) as batch:
        batch.drop_constraint("fk_approvals_tenant_id_invocations", type_="foreignkey")
        batch.create_foreign_key("fk_approvals_invocation", "invocations", new, new, ondelete="CASCADE")


def upgrade() -> None:
    _rekey(NEW)


def downgrade() -> None:
    _rekey(OLD)  # fails where two users share an id, as it must
