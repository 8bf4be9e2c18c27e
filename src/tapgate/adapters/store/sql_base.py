"""What every SQL repository shares: the connection it runs on, its tenant, and one INSERT per table."""

from __future__ import annotations

import functools
from typing import Any, Protocol

from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from tapgate.adapters.store.postgres_raw import PostgresConnection
from tapgate.adapters.store.queries import hot
from tapgate.adapters.store.tenancy import S, owned, scoped
from tapgate.domain.errors import Conflict, StorageError


class Conn(Protocol):
    """What the repositories need of a connection (SQLAlchemy's AsyncConnection, or SQLite's inline one)."""

    dialect: Any

    async def execute(self, statement: Any, parameters: Any = None) -> Any: ...

    async def scalar(self, statement: Any, parameters: Any = None) -> Any: ...

    def begin_nested(self) -> Any: ...


_MISSING = "A row refers to something that does not exist in this tenant."


class Repo:
    """One tenant's rows of one aggregate: every statement is held to its tenant by ``tenancy.py`` (and on
    PostgreSQL, row-level security holds it to that tenant again)."""

    def __init__(self, conn: Conn, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    def scoped(self, statement: S, *, over: Any = None) -> S:
        """``statement`` held to this repository's tenant's rows (``tenancy.scoped``)."""
        return scoped(statement, self.tenant_id, over=over)

    def owned(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row``, to be inserted, filled in as this repository's tenant's (``tenancy.owned``)."""
        return owned(row, self.tenant_id)

    async def _insert(
        self, table: Any, row: dict[str, Any], conflict: str, duplicate: type[Conflict] = Conflict
    ) -> None:
        """Insert ``row``; ``duplicate(conflict)`` if its key exists. No savepoint: a conflict ends the
        whole unit of work, so nothing after it needs the transaction. On PostgreSQL the row is held
        back to go with the unit of work's next statement (``PostgresConnection.hold``), usually the one
        that ends it, and the conflict is raised from there."""
        row = owned(row, self.tenant_id)
        if isinstance(self.conn, PostgresConnection):
            await self.conn.hold(insert_into(table), row, duplicate(conflict), StorageError(_MISSING))
            return
        try:
            await self.conn.execute(insert_into(table), row)
        except IntegrityError as e:
            if is_unique_violation(e):
                raise duplicate(conflict) from e
            raise StorageError(_MISSING) from e


@functools.cache
def insert_into(table: Any) -> Any:
    """One INSERT statement per table, built once: the values come as parameters."""
    return hot(insert(table))


def is_unique_violation(error: IntegrityError) -> bool:
    sqlstate = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    return sqlstate == "23505" or "UNIQUE constraint failed" in str(error.orig)
