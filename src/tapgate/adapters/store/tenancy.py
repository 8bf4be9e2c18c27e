"""Tenancy in one place: the only code that writes a statement's tenant condition.

Every tenant's rows share each table, told apart by their ``tenant_id``. On PostgreSQL row-level security
holds a transaction to its tenant again; on SQLite the condition these functions add is the only thing that
does. So no repository writes ``tenant_id = …`` itself: it builds its statement and hands it to ``scoped``,
joins tables with ``join``, and fills a new row's tenant with ``owned`` (the in-memory store picks its
tenant's rows with ``of_tenant`` and checks a new row's with ``owned``). ``tests/test_tenancy_one_place.py``
reads the store's modules and fails on a tenant condition written anywhere else, or on a statement that
does not pass through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from sqlalchemy import Table, and_, bindparam
from sqlalchemy.sql.dml import Delete, Update
from sqlalchemy.sql.selectable import Join, Select

from tapgate.domain.errors import StorageError

# The tenant of a statement built once for the process's life: each run binds its tenant as ``tenant``.
TENANT: Any = bindparam("tenant")

S = TypeVar("S", Select[Any], Update, Delete)
K = TypeVar("K", bound=tuple[str, ...])
V = TypeVar("V")


def scoped(statement: S, tenant: Any = TENANT, *, over: Any = None) -> S:
    """``statement`` held to ``tenant``'s rows: ``tenant_id = tenant`` for the table an UPDATE or DELETE
    changes, or for each table a SELECT reads: those its columns come from, or the one it reads ``over``
    (a table, or a ``join`` whose other tables its condition holds to the first's tenant). ``tenant`` is
    the tenant itself, ``TENANT`` for a statement built once, or the column of an enclosing statement's
    table for a correlated subquery.

    The tables are taken from what the caller names, not from SQLAlchemy's final FROM list: working that
    out costs a hundred times what building the statement does."""
    if isinstance(statement, Update | Delete):
        return statement.where(_tenant_column(statement.table) == tenant)
    if over is not None:
        statement, froms = statement.select_from(over), [over]
    else:
        froms = statement.columns_clause_froms
    if not froms:
        raise ValueError("A SELECT of no table's columns is scoped over its table: say which with over=.")
    for source in froms:
        statement = statement.where(_tenant_column(source) == tenant)
    return statement


def join(left: Any, right: Table, on: Any, *, outer: bool = False) -> Join:
    """``left`` joined to ``right`` on ``on`` and on their tenants being the same: a row never meets another
    tenant's, and an outer join's missing rows stay missing rather than being filtered out."""
    same = _tenant_column(right) == _tenant_column(left)
    return Join(left, right, and_(same, on), isouter=outer)


def across_tenants(statement: S) -> S:
    """``statement`` as it is, over every tenant's rows: for the few that are meant to (the list of
    tenants). It names the choice where a reader of the code sees it."""
    return statement


def owned(row: dict[str, Any], tenant: str) -> dict[str, Any]:
    """``row`` filled in as ``tenant``'s, to be inserted in ``tenant``'s unit of work; a row that names
    another tenant is refused rather than written there."""
    if row.setdefault("tenant_id", tenant) != tenant:
        raise StorageError("A row of one tenant was written in another tenant's unit of work.")
    return row


def of_tenant(rows: Mapping[K, V], tenant: str) -> list[V]:
    """``tenant``'s rows of a table of the in-memory store, whose keys each begin with their tenant."""
    return [row for key, row in rows.items() if key[0] == tenant]


def tenant_is(place: str) -> str:
    """The tenant condition in a statement written as SQL text (PostgreSQL), ``place`` being where its
    tenant is bound."""
    return f"tenant_id = {place}::text"


def _tenant_column(source: Any) -> Any:
    """The ``tenant_id`` column of a table, or of a join's first table."""
    while isinstance(source, Join):
        source = source.left
    column = source.c.get("tenant_id") if isinstance(source, Table) else None
    if column is None:
        raise ValueError(f"{source} holds no tenant's rows: only tenant tables are scoped.")
    return column
