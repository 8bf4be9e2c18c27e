"""Approvers: every device of kind ``phone`` declares the built-in capability ``approvals`` and is granted
it, so the phones that answered approvals before go on answering them; no other device is made one.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# The entry as tapgate stores the built-in (the server's own text: domain.devices.BUILTINS).
_APPROVALS = json.dumps(
    {
        "name": "approvals",
        "kind": "actuator",
        "description": "Approve for the person: show and sign their approvals (agents' calls, new devices, "
        "console sign-ins, grants).",
        "params": {},
        "confirm": False,
    }
)


def upgrade() -> None:
    # The migrating role bypasses row-level security, so every tenant's phones are made approvers.
    phones = "SELECT d.tenant_id, d.device_uid FROM devices d WHERE d.kind = 'phone'"
    op.execute(
        sa.text(
            "UPDATE capabilities SET granted = :yes, definition = :definition WHERE name = 'approvals' AND "
            f"(tenant_id, device_uid) IN ({phones})"
        ).bindparams(yes=True, definition=_APPROVALS)
    )
    op.execute(
        sa.text(
            "INSERT INTO capabilities (tenant_id, device_uid, name, position, definition, granted) "
            "SELECT d.tenant_id, d.device_uid, 'approvals', "
            "(SELECT COALESCE(MAX(c.position), -1) + 1 FROM capabilities c "
            " WHERE c.tenant_id = d.tenant_id AND c.device_uid = d.device_uid), :definition, :yes "
            "FROM devices d WHERE d.kind = 'phone' AND NOT EXISTS (SELECT 1 FROM capabilities c "
            " WHERE c.tenant_id = d.tenant_id AND c.device_uid = d.device_uid AND c.name = 'approvals')"
        ).bindparams(yes=True, definition=_APPROVALS)
    )


def downgrade() -> None:
    op.execute("DELETE FROM capabilities WHERE name = 'approvals'")
