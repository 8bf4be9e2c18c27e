"""Tenancy in one place: only ``adapters/store/tenancy.py`` writes a statement's tenant condition.

On SQLite that condition is the only isolation between tenants, so the store's modules are read here and
each statement they build must pass through ``scoped`` (or say ``across_tenants``), with no ``tenant_id``
condition or join written anywhere else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tapgate.adapters.store import tables as t
from tapgate.adapters.store.tenancy import owned, scoped
from tapgate.domain.errors import StorageError

STORE = Path(__file__).parent.parent / "src" / "tapgate" / "adapters" / "store"
# The helper itself, and the tables' definitions (their keys and foreign keys name tenant_id).
OUTSIDE = {"tenancy.py", "tables.py"}
BUILDERS = {"select", "update", "delete"}
HELPERS = {"scoped", "across_tenants"}
SQL_CONDITION = re.compile(r"\btenant_id\s*(=|IN\b|<>|!=)", re.IGNORECASE)


def _name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _tenant_column(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "tenant_id"


def hand_written(source: str) -> list[str]:
    """Each place in ``source`` that holds a statement to a tenant by hand, or builds one that no
    tenancy helper holds."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}: {ast.unparse(node)[:90]}"
        if (
            isinstance(node, ast.Compare)
            and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops)
            and any(map(_tenant_column, [node.left, *node.comparators]))
        ):
            found.append(f"a tenant_id condition, {where}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and SQL_CONDITION.search(node.value)
        ):
            found.append(f"a tenant_id condition in SQL text, {where}")
        elif isinstance(node, ast.Call) and _name(node) in ("filter_by", "Join", "select_from"):
            found.append(f"{_name(node)} outside tenancy.py, {where}")
        elif (
            isinstance(node, ast.Call)
            and _name(node) in ("join", "outerjoin")
            and isinstance(node.func, ast.Attribute)
            and ast.unparse(node.func.value).startswith("t.")
        ):
            found.append(f"a join of tables outside tenancy.join, {where}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILDERS:
            # The statement, through any chain of its own methods, must be what a helper is handed.
            held: ast.AST = node
            while isinstance(parent := parents.get(held), ast.Attribute | ast.Call) and (
                getattr(parent, "value", None) is held or getattr(parent, "func", None) is held
            ):
                held = parent
            helper = parents.get(held)
            if not (isinstance(helper, ast.Call) and _name(helper) in HELPERS and helper.args[:1] == [held]):
                found.append(f"a statement no tenancy helper holds, {where}")
    return found


def test_no_store_module_holds_a_statement_to_its_tenant_by_hand() -> None:
    modules = sorted(p for p in STORE.glob("*.py") if p.name not in OUTSIDE)
    assert len(modules) > 10
    found = [f"{p.name} {f}" for p in modules for f in hand_written(p.read_text(encoding="utf-8"))]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "q = select(t.users).where(t.users.c.tenant_id == tenant)",
        "q = self.scoped(select(t.users)).where(c.user_id == u, c.tenant_id == other)",
        "q = scoped(select(t.users)).where(c.user_id.in_(select(c2.user_id).where(c2.name == n)))",
        "q = scoped(select(t.users).where(c.user_id.in_(select(c2.user_id))))",
        "q = update(t.devices).values(status='revoked')",
        "q = delete(t.pairings)",
        "x = s.where(tenant_id == tenant_of_it.tenant_id)",
        "q = text('UPDATE devices SET status = 1 WHERE tenant_id = :t')",
        "q = scoped(select(t.devices).select_from(t.devices.outerjoin(t.capabilities, on)))",
        "q = scoped(select(t.users).filter_by(tenant_id=tenant))",
        "q = scoped(select(func.count()).select_from(t.users).where(c.user_id == u), tenant)",
    ],
)
def test_the_scan_finds_every_way_of_holding_a_statement_to_a_tenant_by_hand(source: str) -> None:
    assert hand_written(source) != []


def test_the_scan_lets_through_statements_the_helpers_hold() -> None:
    source = """
q = scoped(select(t.users)).where(c.user_id == u).order_by(c.user_id)
r = self.scoped(update(t.devices)).where(c.device_uid == d).values(status="revoked")
s = scoped(select(func.count()), over=t.approvals).where(c.user_id.in_(scoped(select(c2.user_id))))
n = across_tenants(select(t.tenants.c.tenant_id)).order_by(t.tenants.c.tenant_id)
"""
    assert hand_written(source) == []


def test_a_select_of_no_tables_columns_is_scoped_only_over_a_table_it_names() -> None:
    with pytest.raises(ValueError, match="over its table"):
        scoped(select(func.count()))
    counted = scoped(select(func.count()), "acme", over=t.users)
    assert "users.tenant_id = :tenant_id_1" in str(counted)


def test_a_row_of_another_tenant_is_refused_rather_than_written_in_this_one() -> None:
    assert owned({"user_id": "ann"}, "acme") == {"user_id": "ann", "tenant_id": "acme"}
    with pytest.raises(StorageError, match="another tenant"):
        owned({"tenant_id": "globex", "user_id": "ann"}, "acme")
