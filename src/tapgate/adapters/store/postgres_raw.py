"""The hot statements (``raw.py``) straight on asyncpg, inside the transaction SQLAlchemy holds.

A unit of work begins and sets its tenant in one round trip on asyncpg (``begin_for_tenant``) and hands
that transaction to SQLAlchemy's asyncpg adapter, which commits or rolls it back as if it had begun it;
every statement that is not hot goes through SQLAlchemy; a hot one is sent on the same asyncpg connection
as a prepared statement (asyncpg's cache, per connection), its parameters and rows converted as
SQLAlchemy's asyncpg dialect converts them. That skips SQLAlchemy's execution path for each statement:
building the context, its greenlet hop into the adapter and the cursor emulation.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.base import Executable

from tapgate.adapters.store.counting import COUNTS, WROTE
from tapgate.adapters.store.raw import RawStatements, Rows


async def begin_for_tenant(conn: AsyncConnection, tenant_id: str) -> None:
    """Begin ``conn``'s transaction and set its tenant for row-level security, in one round trip.

    SQLAlchemy's adapter would send BEGIN on the first statement and the setting as a second one, each
    through a greenlet hop. Here both go as one simple query on asyncpg, and the adapter is given the
    transaction as its own (``_Begun``): its commit and rollback end it, and the engine's events count it
    as before. Raises DBAPIError as SQLAlchemy would, with ``connection_invalidated`` when the connection
    was found dead (the caller retries once on a fresh one)."""
    if "\x00" in tenant_id:
        raise ValueError("a tenant id holds no NUL")
    sync = conn.sync_connection
    assert sync is not None
    proxied = sync.connection  # checked out by engine.begin(): no I/O
    adapted: Any = proxied.dbapi_connection
    driver: Any = proxied.driver_connection
    assert adapted._transaction is None, "the adapter began a transaction already"
    adapted._transaction = _Begun(driver)  # from here the adapter ends it, even if the query fails
    literal = "'" + tenant_id.replace("'", "''") + "'"  # standard_conforming_strings: quotes only
    sql = f"BEGIN; SELECT set_config('app.tenant_id', {literal}, true)"
    COUNTS.statements += 1
    try:
        await driver.execute(sql)
    except Exception as e:
        error = _translated(adapted, driver, conn, sql, e)
        if isinstance(error, DBAPIError) and error.connection_invalidated:
            adapted._transaction = None
            await conn.invalidate()
        raise error from e


class _Begun:
    """The transaction ``begin_for_tenant`` began, in the shape SQLAlchemy's asyncpg adapter ends one."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    async def commit(self) -> None:
        await self._driver.execute("COMMIT")

    async def rollback(self) -> None:
        if not self._driver.is_closed():
            await self._driver.execute("ROLLBACK")


class PostgresConnection:
    """The part of SQLAlchemy's AsyncConnection the repositories use; hot statements go to asyncpg."""

    def __init__(self, conn: AsyncConnection, raw: RawStatements) -> None:
        self._conn = conn
        self._raw = raw
        sync = conn.sync_connection
        assert sync is not None
        proxied = sync.connection  # checked out and in a transaction already: no I/O
        self._adapted: Any = proxied.dbapi_connection  # SQLAlchemy's adapter, which owns the transaction
        self._driver: Any = proxied.driver_connection  # the asyncpg connection
        self._info = sync.info
        self.dialect = conn.dialect

    async def fetchval(self, sql: str, *values: Any, writes: bool) -> Any:
        """One statement written for asyncpg itself (``$n`` places), prepared once per connection."""
        if writes:
            self._info[WROTE] = True
        COUNTS.statements += 1
        try:
            return await self._driver.fetchval(sql, *values)
        except Exception as e:
            raise self._translated(sql, e) from e

    async def execute(self, statement: Executable, parameters: Any = None) -> Any:
        ran = await self._run(statement, parameters)
        return ran if ran is not None else await self._conn.execute(statement, parameters)

    async def scalar(self, statement: Executable, parameters: Any = None) -> Any:
        ran = await self._run(statement, parameters)
        return ran.scalar() if ran is not None else await self._conn.scalar(statement, parameters)

    def begin_nested(self) -> Any:
        return self._conn.begin_nested()

    async def _run(self, statement: Executable, parameters: Any) -> Rows | None:
        compiled = self._raw.find(statement, parameters)
        if compiled is None:
            return None
        values = compiled.values(parameters or {})
        if compiled.writes:
            self._info[WROTE] = True
        COUNTS.statements += 1
        try:
            if compiled.row is None:
                status = await self._driver.execute(compiled.sql, *values)
                return Rows([], _rowcount(status))
            fetched = await self._driver.fetch(compiled.sql, *values)
            return compiled.rows(fetched, len(fetched))
        except Exception as e:  # asyncpg's own error: made SQLAlchemy's, as on every other statement
            raise self._translated(compiled.sql, e) from e

    def _translated(self, sql: str, error: Exception) -> Exception:
        return _translated(self._adapted, self._driver, self._conn, sql, error)


def _translated(adapted: Any, driver: Any, conn: AsyncConnection, sql: str, error: Exception) -> Exception:
    """asyncpg's ``error`` as SQLAlchemy raises it (a DBAPIError), or as it came if not the database's."""
    dbapi = conn.dialect.loaded_dbapi
    try:
        adapted._handle_exception(error)  # raises the DB-API form of asyncpg's error
    except dbapi.Error as shaped:
        invalidated = driver.is_closed()
        return DBAPIError.instance(sql, None, shaped, dbapi.Error, connection_invalidated=invalidated)
    except Exception:  # not the database's: raised as it came
        return error
    return error


def _rowcount(status: str) -> int:
    """The rows an INSERT, UPDATE or DELETE changed, from its command tag (``UPDATE 1``)."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else -1
