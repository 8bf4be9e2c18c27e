"""The hot statements (``raw.py``) straight on asyncpg, inside the transaction SQLAlchemy holds.

A unit of work begins and sets its tenant in one round trip on asyncpg (``begin_for_tenant``) and hands
that transaction to SQLAlchemy's asyncpg adapter, which commits or rolls it back as if it had begun it;
every statement that is not hot goes through SQLAlchemy; a hot one is sent on the same asyncpg connection
as a prepared statement (asyncpg's cache, per connection), its parameters and rows converted as
SQLAlchemy's asyncpg dialect converts them. That skips SQLAlchemy's execution path for each statement:
building the context, its greenlet hop into the adapter and the cursor emulation.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.base import Executable

from tapgate.adapters.store.counting import COUNTS, WROTE
from tapgate.adapters.store.raw import Compiled, RawStatements, Rows

log = logging.getLogger(__name__)


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
    sql = f"BEGIN; SELECT set_config('app.tenant_id', {_literal(tenant_id)}, true)"
    COUNTS.statements += 1
    try:
        await driver.execute(sql)
    except Exception as e:
        error = _translated(adapted, driver, conn, sql, e)
        if isinstance(error, DBAPIError) and error.connection_invalidated:
            adapted._transaction = None
            await conn.invalidate()
        raise error from e


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (standard_conforming_strings: only quotes are doubled)."""
    if "\x00" in text:
        raise ValueError("a tenant id holds no NUL")
    return "'" + text.replace("'", "''") + "'"


class _Begun:
    """The transaction ``begin_for_tenant`` began, in the shape SQLAlchemy's asyncpg adapter ends one."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    async def commit(self) -> None:
        await self._driver.execute("COMMIT")

    async def rollback(self) -> None:
        if not self._driver.is_closed():
            await self._driver.execute("ROLLBACK")


@dataclass(frozen=True, slots=True)
class Held:
    """A row held back to go with the unit of work's next statement (``PostgresConnection.hold``)."""

    sql: str
    values: list[Any]
    table: str
    duplicate: Exception  # raised for a row whose key exists
    missing: Exception  # raised for a row that refers to nothing


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
        self._held: Held | None = None
        self.dialect = conn.dialect

    async def hold(
        self, statement: Executable, parameters: dict[str, Any], duplicate: Exception, missing: Exception
    ) -> None:
        """Hold back an INSERT of one row until the unit of work's next statement, which sends it: the
        statement that ends the unit of work takes it in (``sql_journal.py``), one round trip fewer;
        any other sends it first, on its own. A row whose key exists raises ``duplicate`` then, and one
        that refers to nothing ``missing``."""
        await self._send_held()
        compiled = self._raw.find(statement, parameters)
        table = getattr(statement, "table", None)
        if compiled is None or not compiled.writes or compiled.row is not None or table is None:
            raise TypeError("only a hot INSERT returning nothing is held")
        self._info[WROTE] = True
        self._held = Held(compiled.sql, compiled.values(parameters), table.name, duplicate, missing)

    def take_held(self) -> Held | None:
        """The row held back, for the statement that takes it in (which sends it, or fails with it)."""
        held, self._held = self._held, None
        return held

    async def fetchval(self, sql: str, *values: Any, writes: bool, held: Held | None = None) -> Any:
        """One statement written for asyncpg itself (``$n`` places), prepared once per connection;
        ``held``: it takes in that row (``take_held``)."""
        if held is None:
            await self._send_held()
        if writes:
            self._info[WROTE] = True
        COUNTS.statements += 1
        try:
            return await self._driver.fetchval(sql, *values)
        except Exception as e:
            if held is not None:
                _raise_for_held(held, e)
            raise self._translated(sql, e) from e

    async def execute(self, statement: Executable, parameters: Any = None) -> Any:
        await self._send_held()
        ran = await self._run(statement, parameters)
        return ran if ran is not None else await self._conn.execute(statement, parameters)

    async def scalar(self, statement: Executable, parameters: Any = None) -> Any:
        await self._send_held()
        ran = await self._run(statement, parameters)
        return ran.scalar() if ran is not None else await self._conn.scalar(statement, parameters)

    @contextlib.asynccontextmanager
    async def begin_nested(self) -> AsyncIterator[Any]:
        await self._send_held()
        async with self._conn.begin_nested() as nested:
            yield nested

    async def _send_held(self) -> None:
        held = self.take_held()
        if held is None:
            return
        COUNTS.statements += 1
        try:
            await self._driver.execute(held.sql, *held.values)
        except Exception as e:
            _raise_for_held(held, e)
            raise self._translated(held.sql, e) from e

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


def _raise_for_held(held: Held, error: Exception) -> None:
    """Raise ``held``'s own error if ``error`` is its row's key taken or its reference missing."""
    if getattr(error, "table_name", None) != held.table:
        return
    code = getattr(error, "sqlstate", None)
    if code == "23505":
        raise held.duplicate from error
    if code == "23503":
        raise held.missing from error


def _rowcount(status: str) -> int:
    """The rows an INSERT, UPDATE or DELETE changed, from its command tag (``UPDATE 1``)."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else -1


_FUNCTIONS = "tapgate_read_functions"  # a pooled connection's info: each read's function made on it
_NO_FUNCTIONS = "tapgate_no_read_functions"  # its role may not make them


class ReadingConnection:
    """A reading unit of work's connection on PostgreSQL: each of its reads is one round trip.

    A unit of work begins, sets its tenant and commits: three round trips around a read that is one.
    Here each read runs alone, as its own transaction, through a function that sets the tenant for that
    transaction and then runs the read (``_function``): row-level security sees the tenant as always,
    and the setting ends with the transaction, so a transaction that set no tenant still sees nothing.
    The function is made from the read's own compiled text, once per pooled connection, in the
    session's temporary schema (nothing in the database's schema, and nothing to migrate). At READ
    COMMITTED, two reads in one transaction each see what was committed before they began, as they
    do here. Only hot reads run here (``raw.py``); anything else is a mistake of its caller.
    """

    def __init__(self, engine: AsyncEngine, raw: RawStatements, tenant_id: str) -> None:
        self._engine = engine
        self._raw = raw
        self._tenant_id = tenant_id
        self._conn: AsyncConnection | None = None
        self._read = False  # a read ran: a connection found dead after that is not replaced silently
        self.dialect = engine.dialect

    async def execute(self, statement: Executable, parameters: Any = None) -> Rows:
        compiled = self._raw.find(statement, parameters)
        if compiled is None or compiled.writes or compiled.row is None:
            raise TypeError("a reading unit of work runs hot reads only; use unit_of_work")
        values = compiled.values(parameters or {})
        COUNTS.statements += 1
        COUNTS.transactions += 1  # each read is its own transaction
        for attempt in (1, 2, 3):
            conn = await self._connection()
            sync = conn.sync_connection
            assert sync is not None
            driver: Any = sync.connection.driver_connection
            try:
                call = await self._function(driver, sync.connection.info, compiled)
                if call is None:
                    fetched = await self._in_transaction(driver, compiled.sql, values)
                else:
                    fetched = await driver.fetch(call, *values, self._tenant_id)
            except Exception as e:
                if attempt < 3 and _undefined_function(e):
                    info = sync.connection.info
                    info.pop(_FUNCTIONS, None)  # DISCARD dropped it: made again
                    if attempt == 2:  # lost again at once: a pooler that does not keep sessions
                        info[_NO_FUNCTIONS] = True
                    continue
                error = _translated(sync.connection.dbapi_connection, driver, conn, compiled.sql, e)
                if isinstance(error, DBAPIError) and error.connection_invalidated:
                    await self._drop()
                    if attempt == 1 and not self._read:  # nothing read yet: once more on a fresh one
                        continue
                raise error from e
            self._read = True
            return compiled.rows(fetched, len(fetched))
        raise AssertionError("unreachable")

    async def scalar(self, statement: Executable, parameters: Any = None) -> Any:
        return (await self.execute(statement, parameters)).scalar()

    async def fetchval(self, sql: str, *values: Any, writes: bool) -> Any:
        raise TypeError("a reading unit of work runs hot reads only; use unit_of_work")

    def begin_nested(self) -> Any:
        raise TypeError("a reading unit of work runs hot reads only; use unit_of_work")

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _connection(self) -> AsyncConnection:
        if self._conn is None:
            self._conn = await self._engine.connect().start()  # checked out; no transaction begun
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()
            with contextlib.suppress(Exception):
                await conn.close()

    async def _in_transaction(self, driver: Any, sql: str, values: list[Any]) -> Any:
        """The read in a transaction that sets its tenant, as a unit of work runs it: three round trips,
        for a role that may not make temporary functions."""
        try:
            await driver.execute(
                f"BEGIN; SELECT set_config('app.tenant_id', {_literal(self._tenant_id)}, true)"
            )
            return await driver.fetch(sql, *values)
        finally:
            if not driver.is_closed() and driver.is_in_transaction():
                await driver.execute("ROLLBACK")  # it read only: nothing to commit

    async def _function(self, driver: Any, info: dict[str, Any], compiled: Compiled) -> str | None:
        """The statement that calls the function that runs ``compiled`` for a tenant on this connection,
        the function made now if this connection has not made it yet: its parameters and columns typed
        as PostgreSQL types the read itself, the tenant last. None if the role may not make one (no
        TEMPORARY right on the database; ``tapgate migrate`` grants it)."""
        made: dict[str, str] = info.setdefault(_FUNCTIONS, {})
        call = made.get(compiled.sql)
        if call is not None:
            return call
        if info.get(_NO_FUNCTIONS):
            return None
        name = "tapgate_read_" + hashlib.sha256(compiled.sql.encode()).hexdigest()[:20]
        prepared = await driver.prepare(compiled.sql)
        parameters = [_type_name(p) for p in prepared.get_parameters()]
        columns = [f"tapgate_{i} {_type_name(a.type)}" for i, a in enumerate(prepared.get_attributes())]
        tenant = len(parameters) + 1
        make = (
            f"CREATE OR REPLACE FUNCTION pg_temp.{name}({', '.join([*parameters, 'text'])})\n"
            f"RETURNS TABLE ({', '.join(columns)}) LANGUAGE plpgsql AS $tapgate$\n"
            f"BEGIN\n"
            f"  PERFORM set_config('app.tenant_id', ${tenant}, true);\n"
            f"  RETURN QUERY {compiled.sql};\n"
            f"END\n"
            f"$tapgate$"
        )
        try:
            await driver.execute(make)
        except Exception as e:
            if getattr(e, "sqlstate", None) != "42501":  # insufficient_privilege
                raise
            info[_NO_FUNCTIONS] = True
            log.warning("the app role may not create temporary functions: reads take three round trips")
            return None
        places = ", ".join(f"${n}" for n in range(1, tenant + 1))
        call = f"SELECT * FROM pg_temp.{name}({places})"  # noqa: S608 (a digest's name; numbered places)
        made[compiled.sql] = call
        return call


def _type_name(type_: Any) -> str:
    """A type asyncpg describes, as SQL names it (``pg_catalog.varchar``, ``pg_catalog._text``)."""
    return f'"{type_.schema}"."{type_.name}"'


def _undefined_function(error: Exception) -> bool:
    return getattr(error, "sqlstate", None) == "42883"
