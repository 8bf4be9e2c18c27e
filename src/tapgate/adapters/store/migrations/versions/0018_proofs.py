"""Proofs: each tenant's Ed25519 issuer keys, and what a device signed to decide an approval.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tapgate.adapters.store.migrations.rls import protect
from tapgate.adapters.store.tables import UtcDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "issuer_keys",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("kid", sa.String(64), primary_key=True),
        sa.Column("private_jwk", sa.Text, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    )
    protect("issuer_keys")
    op.create_table(
        "approval_signatures",
        sa.Column("tenant_id", sa.String(40), primary_key=True),
        sa.Column("approval_id", sa.String(40), primary_key=True),
        sa.Column("device_id", sa.String(24), nullable=False),
        sa.Column("alg", sa.String(16), nullable=False),
        sa.Column("public_key", sa.Text, nullable=False),
        sa.Column("signature", sa.String(200), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "approval_id"],
            ["approvals.tenant_id", "approvals.approval_id"],
            ondelete="CASCADE",
        ),
    )
    protect("approval_signatures")


def downgrade() -> None:
    op.drop_table("approval_signatures")
    op.drop_table("issuer_keys")
