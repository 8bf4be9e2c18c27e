"""Row-level security statements shared by the migrations (PostgreSQL only)."""

from __future__ import annotations

from alembic import op

TENANT = "nullif(current_setting('app.tenant_id', true), '')"


def protect(table: str) -> None:
    """Enable and force RLS on ``table`` so only the transaction's tenant's rows are visible."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON {table} "
        f"USING (tenant_id = {TENANT}) WITH CHECK (tenant_id = {TENANT})"
    )
