"""What every SQL repository shares: the connection it runs on, its tenant, and one INSERT per table."""

from __future__ import annotations

import functools
from typing import Any, Protocol

from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from tapgate.adapters.store.queries import hot
from tapgate.domain.errors import Conflict, StorageError


class Conn(Protocol):
    """What the repositories need of a connection (SQLAlchemy's AsyncConnection, or SQLite's inline one)."""

    dialect: Any

    async def execute(self, statement: Any, parameters: Any = None) -> Any: ...

    async def scalar(self, statement: Any, parameters: Any = None) -> Any: ...

    def begin_nested(self) -> Any: ...


class Repo:
    """One tenant's rows of one aggregate: every statement names ``tenant_id`` (and on PostgreSQL, row-level
    security holds it to that tenant again)."""

    def __init__(self, conn: Conn, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def _insert(self, table: Any, row: dict[str, Any], conflict: str) -> None:
        # No savepoint: a conflict ends the whole unit of work, so nothing after it needs the transaction.
        try:
            await self.conn.execute(insert_into(table), row)
        except IntegrityError as e:
            if is_unique_violation(e):
                raise Conflict(conflict) from e
            raise StorageError("A row refers to something that does not exist in this tenant.") from e


@functools.cache
def insert_into(table: Any) -> Any:
    """One INSERT statement per table, built once: the values come as parameters."""
    return hot(insert(table))


def is_unique_violation(error: IntegrityError) -> bool:
    sqlstate = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    return sqlstate == "23505" or "UNIQUE constraint failed" in str(error.orig)
