"""The Store over SQL: SQLite (stdlib sqlite3 on the event loop, ``sqlite.py``) and PostgreSQL (asyncpg, RLS).

Every query is held to its tenant by ``tenancy.py``; on PostgreSQL each transaction also sets
``app.tenant_id`` so that row-level security hides every other tenant's rows even from a query that forgot
to.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import select, text
from sqlalchemy.engine import Result
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.base import Executable

from tapgate.adapters.store import tables as t
from tapgate.adapters.store.counting import count
from tapgate.adapters.store.postgres_raw import PostgresConnection, ReadingConnection, begin
from tapgate.adapters.store.raw import RawStatements
from tapgate.adapters.store.sql_accounts import SqlCredentials, SqlPauses, SqlTenants, SqlUsers
from tapgate.adapters.store.sql_base import Conn
from tapgate.adapters.store.sql_calls import SqlApprovals, SqlIngests, SqlInvocations, SqlSessions
from tapgate.adapters.store.sql_console import SqlConsoleSessions, SqlSignIns
from tapgate.adapters.store.sql_devices import SqlDevices, SqlPairings, SqlPasskeys
from tapgate.adapters.store.sql_journal import ChainHead, KeptHeads, Notify, SqlEvents, SqlJournal
from tapgate.adapters.store.sql_mandates import SqlMandates
from tapgate.adapters.store.sql_outbox import SqlOutbox
from tapgate.adapters.store.sql_proofs import SqlProofs
from tapgate.adapters.store.sqlite import SqliteDatabase
from tapgate.adapters.store.tenancy import across_tenants
from tapgate.adapters.store.urls import engine_url
from tapgate.adapters.wake.local import LocalWake
from tapgate.adapters.wake.postgres import CHANNEL
from tapgate.domain.errors import StorageError

log = logging.getLogger(__name__)
T = TypeVar("T")


class SqlStore:
    """One database, one unit of work per transaction. Build it with :func:`open_sql_store`.

    PostgreSQL runs through asyncpg's pool; SQLite through one connection on the event loop's thread
    (see ``sqlite.py``). Both run the same statements, the hot ones on the driver itself (``raw.py``).
    ``database_notify`` (PostgreSQL): each transaction also sends its keys with ``pg_notify`` for the
    other processes; off when the wake has its own way across processes (NATS) or there are none.
    """

    def __init__(
        self,
        engine: AsyncEngine | None,
        wake: LocalWake | None = None,
        sqlite: SqliteDatabase | None = None,
        database_notify: bool = True,
    ) -> None:
        self.engine = engine
        self.sqlite = sqlite
        self.wake = wake or LocalWake()
        self.is_postgres = sqlite is None
        self.database_notify = database_notify
        self.origin = secrets.token_hex(8)  # names this process's notifications (``wake/postgres.py``)
        self._raw = RawStatements(engine.dialect) if engine is not None else None
        self._sealer = _Sealer(self)

    def unit_of_work(self, tenant_id: str) -> _UnitOfWork:
        """One transaction of ``tenant_id``'s: committed when the block ends, rolled back if it raises; once
        committed, this process's waiters on its keys are woken, and the sealer marked if it left
        entries pending (``sql_journal.py``)."""
        return _UnitOfWork(self, tenant_id, after=True)

    def _transaction(self, tenant_id: str) -> _UnitOfWork:
        """A unit of work that wakes nobody and marks nothing: the sealer's own."""
        return _UnitOfWork(self, tenant_id, after=False)

    def reading(self, tenant_id: str) -> contextlib.AbstractAsyncContextManager[SqlUnitOfWork]:
        """A unit of work that only reads (the Store port). On PostgreSQL each read is one round trip,
        its own transaction (``postgres_raw.ReadingConnection``), where a unit of work would add a
        BEGIN and a COMMIT; on SQLite, where neither costs a round trip, it is a unit of work."""
        if self.sqlite is not None:
            return self.unit_of_work(tenant_id)
        return self._reading_on_postgres(tenant_id)

    @contextlib.asynccontextmanager
    async def _reading_on_postgres(self, tenant_id: str) -> AsyncIterator[SqlUnitOfWork]:
        assert self.engine is not None and self._raw is not None
        conn = ReadingConnection(self.engine, self._raw, tenant_id)
        try:
            uow = SqlUnitOfWork(conn, tenant_id, concurrent=True)
            yield uow
            assert not uow.keys, "a reading unit of work wakes nobody"
        except DBAPIError as e:
            raise _storage_error(e) from e
        finally:
            await conn.close()

    async def _begin(
        self, held: contextlib.AsyncExitStack, first: Executable, parameters: dict[str, Any] | None = None
    ) -> tuple[AsyncConnection, Result[Any]]:
        """A transaction on a pooled connection, held open by ``held``, and its ``first`` statement's
        result (see ``_begun``)."""
        return await self._begun(held, lambda conn: conn.execute(first, parameters))

    async def _begun(
        self, held: contextlib.AsyncExitStack, start: Callable[[AsyncConnection], Awaitable[T]]
    ) -> tuple[AsyncConnection, T]:
        """A transaction on a pooled connection, held open by ``held``, begun by ``start`` (its first
        statement), and what ``start`` returned.

        No ping before each transaction: a connection PostgreSQL closed meanwhile (a restart, an idle
        timeout) fails the first statement, before anything was done, and only then is it replaced and
        the statement sent once more on a fresh one. A pre-ping would cost a network round trip on every
        transaction instead."""
        assert self.engine is not None
        for attempt in (1, 2):
            transaction = contextlib.AsyncExitStack()
            conn = await transaction.enter_async_context(self.engine.begin())
            try:
                started = await start(conn)
            except DBAPIError as e:
                await transaction.__aexit__(type(e), e, e.__traceback__)
                if attempt == 1 and e.connection_invalidated:
                    continue
                raise
            held.push_async_exit(transaction)
            return conn, started
        raise AssertionError("unreachable")

    async def tenant_ids(self) -> Sequence[str]:
        try:
            if self.sqlite is not None:
                async with self.sqlite.reading() as inline:
                    rows = await inline.execute(
                        across_tenants(select(t.tenants.c.tenant_id)).order_by(t.tenants.c.tenant_id)
                    )
                    return [r[0] for r in rows]
            async with contextlib.AsyncExitStack() as held:
                _, rows = await self._begin(held, text("SELECT tapgate_tenant_ids()"))
                return [r[0] for r in rows]
        except DBAPIError as e:
            raise StorageError("The database failed; try again, and check the server's health.") from e

    async def ping(self) -> None:
        try:
            if self.sqlite is not None:
                async with self.sqlite.reading() as inline:
                    await inline.execute(text("SELECT 1"))
                return
            async with contextlib.AsyncExitStack() as held:
                await self._begin(held, text("SELECT 1"))
        except (DBAPIError, OSError) as e:
            raise StorageError("The database cannot be reached.") from e

    async def close(self) -> None:
        await self._sealer.close()
        if self.sqlite is not None:
            self.sqlite.close()
        if self.engine is not None:
            await self.engine.dispose()


class _UnitOfWork:
    """``SqlStore.unit_of_work``, a class: three nested generator context managers (each async generator
    made, registered with asyncio's set of them, and stepped twice) were most of an empty unit of work's
    cost on SQLite. A driver's error in the block or at
    its end is a StorageError."""

    __slots__ = ("_after", "_postgres", "_store", "_tenant_id", "_uow")

    def __init__(self, store: SqlStore, tenant_id: str, after: bool) -> None:
        self._store = store
        self._tenant_id = tenant_id
        self._after = after
        self._postgres: PostgresConnection | None = None

    async def __aenter__(self) -> SqlUnitOfWork:
        store = self._store
        if store.sqlite is not None:
            try:
                inline = await store.sqlite.begin()
            except DBAPIError as e:
                raise _storage_error(e) from e
            self._uow = SqlUnitOfWork(inline, self._tenant_id, concurrent=False, kept=store.sqlite.kept)
            return self._uow
        assert store.engine is not None and store._raw is not None
        try:
            self._postgres = conn = await begin(store.engine, store._raw, self._tenant_id)
        except DBAPIError as e:
            raise _storage_error(e) from e
        self._uow = SqlUnitOfWork(conn, self._tenant_id, concurrent=True)
        return self._uow

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            if self._postgres is None:
                await self._end_on_sqlite(error)
            else:
                await self._end_on_postgres(self._postgres, error)
                if error is None:
                    self._committed()
        except DBAPIError as e:
            raise _storage_error(e) from e
        if isinstance(error, DBAPIError):
            raise _storage_error(error) from error

    def _committed(self) -> None:
        if self._after:
            uow, store = self._uow, self._store
            if uow.chain.left_pending:  # committed without the chain's head: seal it soon
                store._sealer.mark(self._tenant_id)
            store.wake.committed(uow.keys, uow.handed)  # wake this process's waiters at once

    async def _end_on_sqlite(self, error: BaseException | None) -> None:
        """Commit with the units of work that end close by (``sqlite.py``): this returns once the commit
        is done, and the waiters on this unit of work's keys are woken then, even if its caller was
        cancelled meanwhile."""
        sqlite = self._store.sqlite
        assert sqlite is not None
        chain = self._uow.chain
        if error is None:
            try:
                await chain.before_commit()
            except BaseException:
                chain.after_end(committed=False)
                sqlite.end(commit=False)
                raise
        committed = False
        try:
            waiting = sqlite.end(commit=error is None, after=self._committed)
            committed = error is None
        finally:
            chain.after_end(committed)  # a group whose commit fails forgets every head kept meanwhile
        if waiting is not None:
            await waiting

    async def _end_on_postgres(self, conn: PostgresConnection, error: BaseException | None) -> None:
        try:
            if error is None:
                # Delivered to every listening process exactly when this transaction commits; each
                # names this process, whose own listener skips it (its waiters were woken at commit).
                store, uow = self._store, self._uow
                notify = (
                    Notify(CHANNEL, f"{store.origin} ", list(uow.keys)) if store.database_notify else None
                )
                await uow.chain.before_commit(notify)
                await conn.commit()
            else:
                await conn.rollback(cancelled=not isinstance(error, Exception))
        except BaseException as e:
            if error is None:
                await conn.rollback(cancelled=not isinstance(e, Exception))
            raise
        finally:
            await conn.release()


def _storage_error(error: DBAPIError) -> StorageError:
    # The driver's message can quote row contents: log its class only.
    log.error("storage error", extra={"error": type(error.orig).__name__})
    return StorageError("The database failed; try again, and check the server's health.")


def _quiet_drivers() -> None:
    # aiosqlite logs every statement with its parameters at DEBUG, and the parameters hold message
    # text: those records must never be emitted, whatever level the operator picks.
    for name in ("aiosqlite", "sqlalchemy.engine", "sqlalchemy.pool"):
        logging.getLogger(name).setLevel(logging.WARNING)


def open_sql_store(
    database_url: str,
    pool_size: int = 20,
    wake: LocalWake | None = None,
    database_notify: bool = True,
    raw_statements: bool = True,
) -> SqlStore:
    """A store for ``database_url`` with tapgate's connection settings.

    On PostgreSQL at most ``pool_size`` connections, opened as they are first needed and then kept: no
    overflow beyond a smaller kept pool, whose extra connections the pool would close as each came back
    and open again at the next peak. That churn cost a new server process per connection, many a second with
    several gateways under load, and took a large share of their throughput. ``raw_statements`` off
    (SQLite): SQLAlchemy runs the hot statements too; on PostgreSQL the unit of work itself runs on
    asyncpg, and they with it."""
    _quiet_drivers()
    url = engine_url(database_url)
    if url.get_backend_name() == "sqlite":
        return SqlStore(None, wake, SqliteDatabase(url, raw_statements=raw_statements))
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=0)
    count(engine.sync_engine)
    return SqlStore(engine, wake, database_notify=database_notify)


class _Sealer:
    """Seals what writers left pending (``sql_journal.py``) in batches, one tenant at a time, so pending
    rows do not wait for the tenant's next reader. It waits ``DELAY`` after the first such commit and then
    seals everything pending of the tenants marked so far in one transaction each; a tenant marked during
    the pass waits for the next one, so under a steady stream of calls a tenant is sealed once a ``DELAY``
    (a fraction of a transaction a call), not once a call. A pass finds nothing to do where a reader
    sealed first (readers always seal for themselves). A seal that fails is tried again a ``DELAY`` later."""

    DELAY = 1.0  # seconds

    def __init__(self, store: SqlStore) -> None:
        self._store = store
        self._tenants: set[str] = set()
        self._woken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def mark(self, tenant_id: str) -> None:
        self._tenants.add(tenant_id)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._woken = asyncio.Event()
            self._task = loop.create_task(self._run(), name="tapgate-sealer")
        self._woken.set()

    async def _run(self) -> None:
        while True:
            await self._woken.wait()
            await asyncio.sleep(self.DELAY)
            self._woken.clear()
            tenants, self._tenants = self._tenants, set()  # a tenant marked meanwhile waits for the next pass
            for tenant_id in tenants:
                try:
                    async with self._store._transaction(tenant_id) as uow:
                        await uow.chain.sealed()
                except StorageError:  # logged by the transaction; tried again on the next pass
                    self._tenants.add(tenant_id)
                    self._woken.set()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class SqlUnitOfWork:
    """One transaction's repositories, each made when first used (a request uses three or four of them)."""

    def __init__(self, conn: Conn, tenant_id: str, concurrent: bool, kept: KeptHeads | None = None) -> None:
        self.conn = conn
        self.tenant_id = tenant_id
        self.chain = ChainHead(conn, tenant_id, concurrent, kept)
        self.keys: list[str] = []
        self.handed: dict[str, list[object]] = {}  # what hand(key, value) hands with each key

    @functools.cached_property
    def tenants(self) -> SqlTenants:
        return SqlTenants(self.conn, self.tenant_id)

    @functools.cached_property
    def users(self) -> SqlUsers:
        return SqlUsers(self.conn, self.tenant_id)

    @functools.cached_property
    def credentials(self) -> SqlCredentials:
        return SqlCredentials(self.conn, self.tenant_id)

    @functools.cached_property
    def journal(self) -> SqlJournal:
        return SqlJournal(self.conn, self.tenant_id, self.chain)

    @functools.cached_property
    def devices(self) -> SqlDevices:
        return SqlDevices(self.conn, self.tenant_id)

    @functools.cached_property
    def pairings(self) -> SqlPairings:
        return SqlPairings(self.conn, self.tenant_id)

    @functools.cached_property
    def sessions(self) -> SqlSessions:
        return SqlSessions(self.conn, self.tenant_id)

    @functools.cached_property
    def invocations(self) -> SqlInvocations:
        return SqlInvocations(self.conn, self.tenant_id)

    @functools.cached_property
    def events(self) -> SqlEvents:
        return SqlEvents(self.conn, self.tenant_id, self.chain)

    @functools.cached_property
    def outbox(self) -> SqlOutbox:
        return SqlOutbox(self.conn, self.tenant_id)

    @functools.cached_property
    def approvals(self) -> SqlApprovals:
        return SqlApprovals(self.conn, self.tenant_id)

    @functools.cached_property
    def pauses(self) -> SqlPauses:
        return SqlPauses(self.conn, self.tenant_id)

    @functools.cached_property
    def mandates(self) -> SqlMandates:
        return SqlMandates(self.conn, self.tenant_id)

    @functools.cached_property
    def proofs(self) -> SqlProofs:
        return SqlProofs(self.conn, self.tenant_id)

    @functools.cached_property
    def ingests(self) -> SqlIngests:
        return SqlIngests(self.conn, self.tenant_id)

    @functools.cached_property
    def sign_ins(self) -> SqlSignIns:
        return SqlSignIns(self.conn, self.tenant_id)

    @functools.cached_property
    def console_sessions(self) -> SqlConsoleSessions:
        return SqlConsoleSessions(self.conn, self.tenant_id)

    @functools.cached_property
    def passkeys(self) -> SqlPasskeys:
        return SqlPasskeys(self.conn, self.tenant_id)

    def notify(self, key: str) -> None:
        if key not in self.keys:
            self.keys.append(key)

    def hand(self, key: str, value: object) -> None:
        self.notify(key)
        self.handed.setdefault(key, []).append(value)
