"""SQLite on the event loop's own thread: one connection, one writer at a time, no thread hops.

SQLite answers a small statement in microseconds and, in WAL mode with ``synchronous=NORMAL``, commits
without waiting for the disk; handing each statement to a worker thread (as an async driver does) costs
far more than running it. So the SQLite store holds one stdlib sqlite3 connection (through SQLAlchemy
Core, for the same statements as PostgreSQL, the hot ones compiled once and run on the driver itself:
``sqlite_raw.py``), serialises units of work with an asyncio lock, and runs them inline. A commit in
WAL mode survives a killed process; only a power loss can drop the last transactions, which is what
``synchronous=NORMAL`` trades for speed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine, NestedTransaction, Result
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.base import Executable

from tapgate.adapters.store.counting import COUNTS, WROTE, count, ended
from tapgate.adapters.store.raw import Rows
from tapgate.adapters.store.sql_journal import KeptHeads
from tapgate.adapters.store.sqlite_raw import SqliteStatements, on_driver


class SyncConnection:
    """The part of SQLAlchemy's AsyncConnection the repositories use, over a sync connection; the hot
    statements go straight to sqlite3 (``sqlite_raw.py``)."""

    def __init__(self, conn: Connection, raw: SqliteStatements) -> None:
        self.connection = conn
        self.driver: Any = conn.connection.driver_connection
        self.dialect = conn.dialect
        self._raw = raw
        self._info = conn.info

    async def execute(self, statement: Executable, parameters: Any = None) -> Result[Any] | Rows:
        ran = self._raw.run(self.driver, self._info, statement, parameters)
        return ran if ran is not None else self.connection.execute(statement, parameters)

    async def scalar(self, statement: Executable, parameters: Any = None) -> Any:
        ran = self._raw.run(self.driver, self._info, statement, parameters)
        return ran.scalar() if ran is not None else self.connection.scalar(statement, parameters)

    def begin_nested(self) -> _Savepoint:
        return _Savepoint(self.connection.begin_nested())


class _Savepoint:
    def __init__(self, savepoint: NestedTransaction) -> None:
        self._savepoint = savepoint

    async def __aenter__(self) -> _Savepoint:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            self._savepoint.commit()
        else:
            self._savepoint.rollback()


class SqliteDatabase:
    """The one connection, and the lock that gives it to one unit of work at a time."""

    def __init__(self, url: URL) -> None:
        self.engine: Engine = create_engine(
            url.set(drivername="sqlite+pysqlite"),
            poolclass=StaticPool,
            connect_args={"timeout": 30, "check_same_thread": False},
        )
        _tune(self.engine)
        count(self.engine)
        self._conn: Connection | None = None
        self._sync: SyncConnection | None = None  # over _conn: it keeps nothing of a unit of work's
        self._lock = asyncio.Lock()
        self._raw = SqliteStatements(self.engine.dialect)
        self.kept = KeptHeads(self._data_version)  # the chain heads this connection committed

    def _data_version(self) -> int:
        assert self._sync is not None
        COUNTS.statements += 1
        return int(self._sync.driver.execute("PRAGMA data_version").fetchone()[0])

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            self._conn = self.engine.connect()
        return self._conn

    async def begin(self) -> SyncConnection:
        """Begin one unit of work, once the one before it has ended: ``BEGIN IMMEDIATE`` on the driver
        itself. A statement that goes through SQLAlchemy joins the transaction (its own begin is
        skipped), and SQLAlchemy then ends it. Every begin that returns is followed by one ``end``."""
        await self._lock.acquire()
        try:
            inline = self._inline()
            driver = inline.driver
            on_driver("BEGIN IMMEDIATE", lambda: driver.execute("BEGIN IMMEDIATE"))
        except BaseException:
            self._lock.release()
            raise
        return inline

    def end(self, commit: bool) -> None:
        """Commit or roll back the unit of work begun last, and let the next one begin."""
        try:
            inline = self._sync
            assert inline is not None, "end without begin"
            _end(inline.connection, inline.driver, commit)
        finally:
            self._lock.release()

    def _inline(self) -> SyncConnection:
        conn = self._connection()
        if self._sync is None or self._sync.connection is not conn or conn.invalidated:
            self._sync = SyncConnection(conn, self._raw)  # a connection made again has a new driver
            self.kept.forget()  # and data versions of its own
        return self._sync

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[SyncConnection]:
        async with self._lock:
            conn = self._connection()
            try:
                yield self._inline()
            finally:
                if conn.in_transaction():
                    conn.rollback()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self.engine.dispose()


def _tune(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # SQLAlchemy's "begin" event issues BEGIN IMMEDIATE instead of pysqlite's deferred BEGIN, so a
        # second process (a `tapgate` command beside the server) waits its turn instead of deadlocking.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if not conn.connection.driver_connection.in_transaction:  # else: joining a unit of work's
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def _end(conn: Connection, driver: Any, commit: bool) -> None:
    """Commit or roll back the unit of work, counted as SQLAlchemy's own ends are (``counting.py``)."""
    if conn.in_transaction():  # a statement through SQLAlchemy joined it: SQLAlchemy ends it
        if commit:
            conn.commit()
        else:
            conn.rollback()
        return
    wrote = conn.info.pop(WROTE, False)
    if commit:
        on_driver("COMMIT", driver.commit)
        ended(wrote=wrote)
    else:
        ended(wrote=False)
        on_driver("ROLLBACK", driver.rollback)
