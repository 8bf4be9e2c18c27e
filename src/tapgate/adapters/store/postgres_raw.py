"""A unit of work on PostgreSQL, on the pooled connection's own asyncpg driver.

A unit of work checks a connection out of SQLAlchemy's pool (``AsyncEngine.raw_connection``: the pool keeps
its size, its connections' setup and their replacement), begins and sets its tenant in one round trip on
asyncpg (``begin``), and commits or rolls back there too, with nothing of SQLAlchemy's engine in between:
its connection and transaction objects, their events and four greenlet hops cost CPU on every unit of
work. Hot statements (``raw.py``) run on the driver as
prepared statements (asyncpg's cache, per connection), their parameters and rows converted as
SQLAlchemy's asyncpg dialect converts them. A statement that is not hot makes SQLAlchemy a connection over
the same pooled connection, which joins the transaction begun here (``_Begun``) and ends it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.base import Executable

from tapgate.adapters.store.counting import COUNTS, WROTE, ended
from tapgate.adapters.store.raw import Compiled, RawStatements, Rows

log = logging.getLogger(__name__)


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (standard_conforming_strings: only quotes are doubled)."""
    if "\x00" in text:
        raise ValueError("a tenant id holds no NUL")
    return "'" + text.replace("'", "''") + "'"


class _Begun:
    """The transaction ``begin`` began, in the shape SQLAlchemy's asyncpg adapter ends one: a SQLAlchemy
    connection made over the same pooled connection joins it, and its commit or rollback ends it."""

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
    """A unit of work's connection: the part of SQLAlchemy's AsyncConnection the repositories use, hot
    statements on asyncpg, any other through a SQLAlchemy connection made when first needed."""

    def __init__(self, proxied: Any, raw: RawStatements, engine: AsyncEngine) -> None:
        self._proxied = proxied  # the pool's connection, checked out and in a transaction already
        self._raw = raw
        self._engine = engine
        self._conn: AsyncConnection | None = None  # SQLAlchemy's over the same one, once it is needed
        self._adapted: Any = proxied.dbapi_connection  # SQLAlchemy's adapter, which sees the transaction
        self._driver: Any = proxied.driver_connection  # the asyncpg connection
        self._info = proxied.info
        self._held: Held | None = None
        self.dialect = engine.dialect

    async def commit(self) -> None:
        """End the unit of work's transaction with COMMIT (through SQLAlchemy if it joined it)."""
        await self._send_held()
        if self._conn is not None:
            await self._conn.commit()
            return
        self._adapted._transaction = None  # the pool's reset must find nothing to roll back
        try:
            await self._driver.execute("COMMIT")
        except Exception as e:
            raise self._translated("COMMIT", e) from e
        ended(self._info.pop(WROTE, False))

    async def rollback(self, cancelled: bool) -> None:
        """End it with ROLLBACK; never raises. ``cancelled``: the task was cancelled, maybe within a
        statement, so the connection is dropped (the pool opens another) rather than trusted again."""
        self._held = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.rollback()
            if cancelled and self._proxied.is_valid:  # SQLAlchemy may have closed it already
                self._proxied.invalidate()
            return
        begun, self._adapted._transaction = self._adapted._transaction, None
        if begun is None:  # COMMIT was sent and failed: PostgreSQL ended the transaction itself
            ended(False)
            self._info.pop(WROTE, None)
            if cancelled or self._driver.is_closed():
                self._proxied.invalidate()
            return
        ended(False)
        self._info.pop(WROTE, None)
        if cancelled or self._driver.is_closed():
            self._proxied.invalidate()
            return
        try:
            await self._driver.execute("ROLLBACK")
        except Exception:  # the connection is in no state to be trusted: the pool opens another
            self._proxied.invalidate()
        except BaseException:
            self._proxied.invalidate()
            raise

    async def release(self) -> None:
        """Give the connection back to the pool (SQLAlchemy's connection does, where one was made)."""
        if self._conn is None:
            self._proxied.close()
            return
        conn, self._conn = self._conn, None
        await conn.close()

    async def _sqlalchemy(self) -> AsyncConnection:
        """SQLAlchemy's connection over this one, in its transaction (made at the first statement that is
        not hot; from then on it ends the transaction and gives the connection back)."""
        if self._conn is None:
            sync = Connection(self._engine.sync_engine, connection=self._proxied)  # no I/O
            self._conn = AsyncConnection(self._engine, sync)
        return self._conn

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
        return ran if ran is not None else await (await self._sqlalchemy()).execute(statement, parameters)

    async def scalar(self, statement: Executable, parameters: Any = None) -> Any:
        await self._send_held()
        ran = await self._run(statement, parameters)
        if ran is not None:
            return ran.scalar()
        return await (await self._sqlalchemy()).scalar(statement, parameters)

    @contextlib.asynccontextmanager
    async def begin_nested(self) -> AsyncIterator[Any]:
        await self._send_held()
        async with (await self._sqlalchemy()).begin_nested() as nested:
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
        return _translated(self._adapted, self._driver, self.dialect, sql, error)


async def begin(engine: AsyncEngine, raw: RawStatements, tenant_id: str) -> PostgresConnection:
    """A pooled connection in a transaction for ``tenant_id``'s rows (row-level security): BEGIN and the
    tenant in one round trip. End it with ``commit`` or ``rollback``, then ``release`` it.

    No ping first: a connection PostgreSQL closed meanwhile (a restart, an idle timeout) fails the BEGIN,
    before anything was done, and only then is it replaced and the BEGIN sent once more on a fresh one.
    Raises DBAPIError as SQLAlchemy would."""
    sql = f"BEGIN; SELECT set_config('app.tenant_id', {_literal(tenant_id)}, true)"
    for attempt in (1, 2):
        proxied = await checkout(engine)
        adapted, driver = proxied.dbapi_connection, proxied.driver_connection
        assert adapted._transaction is None, "a pooled connection came back in a transaction"
        COUNTS.statements += 1
        try:
            await driver.execute(sql)
        except BaseException as e:
            dead = driver.is_closed()
            if dead or not isinstance(e, Exception):
                proxied.invalidate()
            elif driver.is_in_transaction():
                with contextlib.suppress(Exception):
                    await driver.execute("ROLLBACK")
            proxied.close()
            if not isinstance(e, Exception):
                raise
            if attempt == 1 and dead:
                continue
            raise _translated(adapted, driver, engine.dialect, sql, e) from e
        adapted._transaction = _Begun(driver)  # SQLAlchemy's connection, if one is made, joins it
        return PostgresConnection(proxied, raw, engine)
    raise AssertionError("unreachable")


async def checkout(engine: AsyncEngine) -> Any:
    """A connection of ``engine``'s pool, outside any transaction; ``close`` gives it back. Raises
    DBAPIError as SQLAlchemy's own check-out would."""
    dbapi = engine.dialect.loaded_dbapi
    try:
        return await engine.raw_connection()
    except dbapi.Error as e:
        raise DBAPIError.instance(None, None, e, dbapi.Error) from e


def _translated(adapted: Any, driver: Any, dialect: Any, sql: str, error: Exception) -> Exception:
    """asyncpg's ``error`` as SQLAlchemy raises it (a DBAPIError), or as it came if not the database's."""
    dbapi = dialect.loaded_dbapi
    try:
        adapted._handle_exception(error)  # raises the DB-API form of asyncpg's error
    except dbapi.Error as shaped:
        invalidated = driver.is_closed()
        translated: Exception = DBAPIError.instance(
            sql, None, shaped, dbapi.Error, connection_invalidated=invalidated
        )
        return translated
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
        self._proxied: Any = None  # the pool's connection, checked out at the first read
        self._busy = False  # inside a read: closed now (cancelled), the connection is not given back
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
            proxied = await self._connection()
            driver: Any = proxied.driver_connection
            self._busy = True
            try:
                call = await self._function(driver, proxied.info, compiled)
                if call is None:
                    fetched = await self._in_transaction(driver, compiled.sql, values)
                else:
                    fetched = await driver.fetch(call, *values, self._tenant_id)
            except Exception as e:
                self._busy = False
                if attempt < 3 and _undefined_function(e):
                    proxied.info.pop(_FUNCTIONS, None)  # DISCARD dropped it: made again
                    if attempt == 2:  # lost again at once: a pooler that does not keep sessions
                        proxied.info[_NO_FUNCTIONS] = True
                    continue
                error = _translated(proxied.dbapi_connection, driver, self.dialect, compiled.sql, e)
                if isinstance(error, DBAPIError) and error.connection_invalidated:
                    self._drop()
                    if attempt == 1 and not self._read:  # nothing read yet: once more on a fresh one
                        continue
                raise error from e
            self._busy = False
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
        """Give the connection back to the pool; one closed inside a read (a cancelled request) is
        dropped instead, as its statement may still be running (the pool opens another)."""
        if self._busy:
            self._drop()
            return
        proxied, self._proxied = self._proxied, None
        if proxied is not None:
            proxied.close()

    async def _connection(self) -> Any:
        if self._proxied is None:
            self._proxied = await checkout(self._engine)  # no transaction begun
        return self._proxied

    def _drop(self) -> None:
        proxied, self._proxied = self._proxied, None
        if proxied is not None:
            proxied.invalidate()
            proxied.close()

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
