"""SQLite on the event loop's own thread: one connection, one writer at a time, no thread hops.

SQLite answers a small statement in microseconds and, in WAL mode with ``synchronous=NORMAL``, commits
without waiting for the disk; handing each statement to a worker thread (as an async driver does) costs
far more than running it. So the SQLite store holds one stdlib sqlite3 connection (through SQLAlchemy
Core, for the same statements as PostgreSQL, the hot ones compiled once and run on the driver itself:
``sqlite_raw.py``), serialises units of work with an asyncio lock, and runs them inline. A commit in
WAL mode survives a killed process; only a power loss can drop the last transactions, which is what
``synchronous=NORMAL`` trades for speed.

Units of work that end close together share one commit (group commit). A commit costs more than the
statements of a unit of work around it — it writes every page the transaction changed to the WAL, and
now and then a checkpoint — and under load most of those pages (a table's last leaf, an index's, the
chain heads) are the same from one unit to the next. So a unit of work that wrote does not commit as it
ends: it leaves the transaction open, and the commit runs once the units of work already waiting to run
have had their turn (``loop.call_soon``), and those queued for the store's lock too (one queued there
resumes a turn after the lock is let go, so a commit scheduled meanwhile would run without it; up to
``MOST`` a group). Those begin inside the open transaction, each behind a
savepoint, so that one that fails rolls back its own writes only. Every unit of work of the group,
including one that only read what another had written, returns only once the commit is done, and fails
if the commit fails: nothing is acknowledged, handed on or woken for before it is durable. The write lock
is held from the group's ``BEGIN IMMEDIATE`` to its commit, so another connection (a ``tapgate`` command)
waits for the group, not for each unit of work.

Waiting costs a turn of the event loop, which a unit of work with no company pays for nothing; so units
of work wait while recent groups had company (until ``PATIENCE`` groups in a row had none), and otherwise
one in every ``PROBE`` does, to notice when load comes.

The WAL's checkpoints run on a thread of their own (``Checkpointer``), not in a commit. SQLite's own
checkpoint runs in whichever commit takes the WAL past a thousand pages: it copies the pages into the
database file and waits for the disk twice, on the event loop's thread, stalling every link and request
of the process meanwhile (a commit in a hundred took milliseconds, and those held more than half of all
commit time). Here the connection on the loop never checkpoints; a thread with a connection of its own
runs a passive checkpoint (one that never blocks a writer) shortly after commits came, with the GIL
released while SQLite works. What a commit promises is unchanged: in WAL mode a commit is in the WAL
file, which a checkpoint syncs before it copies. Under steady load a passive checkpoint never copies
everything, and SQLite starts the WAL over only when a transaction begins with everything copied; so past
a size the next unit of work first copies what the thread's last checkpoint left
(``Checkpointer.catch_up``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine, NestedTransaction, Result
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.base import Executable

from tapgate.adapters.store.counting import COUNTS, WROTE, count, ended
from tapgate.adapters.store.raw import Rows
from tapgate.adapters.store.sql_journal import KeptHeads
from tapgate.adapters.store.sqlite_raw import SqliteStatements, driver_error, on_driver

log = logging.getLogger(__name__)


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


class _Group:
    """The units of work that ended in the open transaction: what waits for its commit, and what runs
    once it is done."""

    __slots__ = ("after", "waiting", "wrote")

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[None]] = []
        self.after: list[Callable[[], None]] = []
        self.wrote = False

    @property
    def size(self) -> int:
        return len(self.waiting)

    def join(self, wrote: bool, after: Callable[[], None] | None) -> asyncio.Future[None]:
        self.wrote |= wrote
        if after is not None:
            self.after.append(after)
        waiting = asyncio.get_running_loop().create_future()
        self.waiting.append(waiting)
        return waiting

    def committed(self) -> None:
        try:
            for after in self.after:  # the wakes: run even for a unit of work whose caller was cancelled
                after()
        finally:  # and whatever they do, the units of work return: their writes are committed
            for waiting in self.waiting:
                if not waiting.done():
                    waiting.set_result(None)

    def failed(self, error: BaseException) -> None:
        for waiting in self.waiting:
            if not waiting.done():
                waiting.set_exception(error)


_SAVEPOINT = "tapgate_unit"


# Bytes of a WAL file kept when the WAL starts over: one that grew past it (while another connection
# read an old snapshot, say) is cut back to it.
WAL_KEPT = 64 * 2**20


class Checkpointer:
    """Checkpoints the WAL of the database at ``path`` on a thread of its own, shortly after commits:
    ``committed`` wakes it (a flag, when it is awake already), it waits ``GATHER`` seconds for more
    commits to come, and runs one passive checkpoint for all of them. The thread starts with the first
    commit and sleeps while nothing commits.

    A passive checkpoint never waits for the writer, so under steady load it always ends a few commits
    behind it; and SQLite starts the WAL over only when a transaction begins with every frame copied.
    Once a checkpoint finds the WAL past ``restart`` frames, ``restart_due`` asks the store to
    ``catch_up`` before its next transaction: it checkpoints what is left (the commits since the last
    pass) on the loop's connection, and the transaction writes from the WAL's start."""

    GATHER = 0.05  # seconds: at most twenty checkpoints a second under load, each of what came meanwhile
    RESTART = 4000  # frames (16 MiB of 4 KiB pages) before the WAL is caught up with and starts over

    def __init__(self, path: str, restart: int = RESTART, gather: float = GATHER) -> None:
        self._path = path
        self._restart = restart
        self._gather = gather
        self._due = threading.Event()  # commits came since the last checkpoint
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0  # checkpoints run
        self.restarts = 0  # catch-ups run
        self.restart_due = False  # the WAL is long: catch up before the next transaction begins

    def committed(self) -> None:
        """A commit on the loop's connection: checkpoint soon."""
        if self._due.is_set():
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tapgate-sqlite-checkpoint", daemon=True)
            self._thread.start()
        self._due.set()

    def catch_up(self, driver: sqlite3.Connection) -> None:
        """Checkpoint, on the loop's own connection ``driver`` with no transaction open, what the
        thread's last pass left (the commits since): the loop's next transaction then finds every frame
        copied and writes from the WAL's start. Run inline, not handed to the thread: the thread waits
        for the GIL while the loop is busy, and units of work that queued on the store's lock meanwhile
        would each commit alone."""
        self.restart_due = False
        self.restarts += 1
        try:
            driver.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as e:  # the thread's next pass asks again
            log.warning("a SQLite checkpoint failed (%s); the next commit asks again", type(e).__name__)

    def close(self) -> None:
        """Stop the thread, after the checkpoint it may be running; the loop's connection, closed after
        it as the last one, checkpoints what is left."""
        self._closing.set()
        self._due.set()
        if self._thread is not None:
            self._thread.join(timeout=30)  # a checkpoint is milliseconds; a disk that hangs is not ours
            if self._thread.is_alive():
                log.warning("the SQLite checkpoint thread did not stop within 30 s; closing without it")

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self._path, timeout=30, isolation_level=None)
        except sqlite3.Error as e:  # the database opened on the loop: not seen, but then say so
            log.error("the SQLite checkpoint thread could not open the database (%s)", type(e).__name__)
            return
        try:
            db.execute("PRAGMA synchronous=NORMAL")
            while not self._closing.is_set():  # a close that came during a checkpoint ends it here
                self._due.wait()
                if self._closing.wait(self._gather):  # the next moment's commits join this checkpoint
                    return
                self._due.clear()  # after the wait: a close may have set it already (see the loop)
                if self._checkpoint(db) >= self._restart:
                    self.restart_due = True
        finally:
            db.close()

    def _checkpoint(self, db: sqlite3.Connection) -> int:
        """One passive checkpoint; the frames the WAL holds (0 if it failed)."""
        self.runs += 1
        try:
            _busy, frames, _copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as e:  # the next commit tries again; the WAL grows meanwhile
            log.warning("a SQLite checkpoint failed (%s); the next commit asks again", type(e).__name__)
            return 0
        return int(frames)


class SqliteDatabase:
    """The one connection, the lock that gives it to one unit of work at a time, and the group of units
    of work waiting for the open transaction's commit."""

    PROBE = 16  # with no company lately, one in this many units of work that wrote waits
    PATIENCE = 8  # groups in a row without company before units of work stop waiting
    MOST = 64  # units of work in a group before it commits though more are queued for the store

    def __init__(self, url: URL, raw_statements: bool = True) -> None:
        path = url.database or ""
        # A database in memory has no WAL; one on disk is checkpointed on a thread of its own.
        self.checkpointer = Checkpointer(path) if path and path != ":memory:" else None
        self.engine: Engine = create_engine(
            url.set(drivername="sqlite+pysqlite"),
            poolclass=StaticPool,
            connect_args={"timeout": 30, "check_same_thread": False},
        )
        _tune(self.engine, checkpoints=self.checkpointer is None)
        count(self.engine)
        self._conn: Connection | None = None
        self._sync: SyncConnection | None = None  # over _conn: it keeps nothing of a unit of work's
        self._lock = asyncio.Lock()
        self._raw = SqliteStatements(self.engine.dialect, raw_statements)
        self.kept = KeptHeads(self._data_version)  # the chain heads this connection committed
        self._group: _Group | None = None  # units of work that ended in the open transaction
        self._joined = False  # the unit of work running now began inside the group's transaction
        self._version: int | None = None  # the data version read in the open transaction
        self._flush_due = False  # the group's commit came due while a unit of work ran or others queued
        self._queued = 0  # units of work waiting for the lock
        self._company = 0  # groups without company to go before units of work stop waiting
        self._alone = 0  # units of work that wrote and committed alone since

    def _data_version(self) -> int:
        """``PRAGMA data_version``, read once a transaction: the write lock is held throughout, so no
        other connection can commit between a group's units of work."""
        if self._version is None:
            assert self._sync is not None
            COUNTS.statements += 1
            self._version = int(self._sync.driver.execute("PRAGMA data_version").fetchone()[0])
        return self._version

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            self._conn = self.engine.connect()
        return self._conn

    async def begin(self) -> SyncConnection:
        """Begin one unit of work, once the one before it has ended: ``BEGIN IMMEDIATE`` on the driver
        itself, or a savepoint in the open transaction of a group. A statement that goes through
        SQLAlchemy joins the transaction (its own begin is skipped), and SQLAlchemy then ends it. Every
        begin that returns is followed by one ``end``."""
        self._queued += 1
        try:
            await self._lock.acquire()
        finally:
            self._queued -= 1
            if self._flush_due and not self._lock.locked():  # cancelled while queued, and the last
                self._flush()
        try:
            inline = self._inline()
            driver = inline.driver
            if self._group is None and self.checkpointer is not None and self.checkpointer.restart_due:
                self.checkpointer.catch_up(driver)  # no transaction is open: the next starts the WAL over
            self._joined = self._group is not None
            if self._joined:
                on_driver("SAVEPOINT", lambda: driver.execute(f"SAVEPOINT {_SAVEPOINT}"))
            else:
                on_driver("BEGIN IMMEDIATE", lambda: driver.execute("BEGIN IMMEDIATE"))
                self._version = None
        except BaseException:
            self._release()
            raise
        return inline

    def end(self, commit: bool, after: Callable[[], None] | None = None) -> asyncio.Future[None] | None:
        """End the unit of work begun last and let the next one begin. Rolled back at once; committed
        at once if it wrote nothing of its own in a transaction of its own (or through SQLAlchemy, which
        commits what the group wrote with it), else with its group: then the future to await, done once
        the commit is. ``after`` runs once it is committed (at once, or at the group's commit)."""
        try:
            inline = self._sync
            assert inline is not None, "end without begin"
            conn, driver = inline.connection, inline.driver
            if self._joined:
                return self._end_joined(conn, driver, commit, after)
            if not commit or conn.in_transaction() or not conn.info.get(WROTE) or not self._waits():
                _end(conn, driver, commit)
                if commit:
                    self._committed()
                    if after is not None:
                        after()
                return None
            self._group = _Group()
            asyncio.get_running_loop().call_soon(self._flush)
            return self._group.join(conn.info.pop(WROTE, False), after)
        finally:
            self._release()

    def _release(self) -> None:
        self._lock.release()
        if self._flush_due:
            self._flush()

    def _waits(self) -> bool:
        """Whether a unit of work that wrote, in a transaction of its own, leaves it open for a group."""
        if self._company > 0 or self._queued:
            return True
        self._alone += 1
        return self._alone % self.PROBE == 0

    def _end_joined(
        self, conn: Connection, driver: Any, commit: bool, after: Callable[[], None] | None
    ) -> asyncio.Future[None] | None:
        group = self._group
        assert group is not None
        if not commit:
            on_driver("ROLLBACK TO", lambda: driver.execute(f"ROLLBACK TO {_SAVEPOINT}"))
            conn.info.pop(WROTE, None)
        on_driver("RELEASE", lambda: driver.execute(f"RELEASE {_SAVEPOINT}"))
        waiting = group.join(conn.info.pop(WROTE, False), after) if commit else None
        if conn.in_transaction():  # a statement through SQLAlchemy joined: commit the group with it
            self._commit_group()
        return waiting

    def _flush(self) -> None:
        """The group's commit, once the units of work that were waiting to run have joined it."""
        if self._lock.locked() or (self._queued and self._group is not None and self._group.size < self.MOST):
            # A unit of work is running (it awaits something), or others are queued for the store: the
            # last of them to end commits the group. A unit of work queued on the lock resumes a turn
            # after it was let go, when a commit scheduled meanwhile would have run without it.
            self._flush_due = True
            return
        self._flush_due = False
        if self._group is not None:
            self._commit_group()

    def _commit_group(self) -> None:
        group, self._group = self._group, None
        assert group is not None and self._sync is not None
        self._company = self.PATIENCE if len(group.waiting) > 1 else max(self._company - 1, 0)
        inline = self._sync
        try:
            _end(inline.connection, inline.driver, True, group.wrote)
        except BaseException as e:
            self.kept.forget()  # the heads its units of work kept were never committed
            group.failed(e)
            return
        self._committed()
        group.committed()

    def _committed(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.committed()

    def _inline(self) -> SyncConnection:
        conn = self._connection()
        if self._sync is None or self._sync.connection is not conn or conn.invalidated:
            self._sync = SyncConnection(conn, self._raw)  # a connection made again has a new driver
            self.kept.forget()  # and data versions of its own
            group, self._group = self._group, None
            if group is not None:  # its transaction went with the connection it was open on
                group.failed(driver_error("COMMIT", sqlite3.OperationalError("the connection was lost")))
        return self._sync

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[SyncConnection]:
        """The connection for a read outside any unit of work, once the open group has committed."""
        async with self._lock:
            if self._group is not None:
                self._commit_group()
            conn = self._connection()
            try:
                yield self._inline()
            finally:
                if conn.in_transaction():
                    conn.rollback()

    def close(self) -> None:
        """Close the connection, committing the open group first unless a unit of work is still running
        in it (the store is closed under it): then every unit of work of the group fails."""
        group = self._group
        if group is not None and not self._lock.locked():
            self._commit_group()
        elif group is not None:
            self._group = None
            group.failed(driver_error("COMMIT", sqlite3.OperationalError("the store was closed")))
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self._conn is not None:
            self._conn.close()
        self.engine.dispose()


def _tune(engine: Engine, checkpoints: bool) -> None:
    """``checkpoints``: the connection checkpoints the WAL itself (else a ``Checkpointer`` does)."""

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
        cursor.execute(f"PRAGMA journal_size_limit={WAL_KEPT}")
        if not checkpoints:
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if not conn.connection.driver_connection.in_transaction:  # else: joining a unit of work's
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def _end(conn: Connection, driver: Any, commit: bool, wrote: bool = False) -> None:
    """Commit or roll back the transaction, counted as SQLAlchemy's own ends are (``counting.py``); a
    commit that fails is rolled back, so that the next transaction can begin. ``wrote``: a group's
    units of work wrote."""
    if conn.in_transaction():  # a statement through SQLAlchemy joined it: SQLAlchemy ends it
        if wrote:
            conn.info[WROTE] = True
        if commit:
            try:
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
        else:
            conn.rollback()
        return
    wrote = conn.info.pop(WROTE, False) or wrote
    if commit:
        try:
            on_driver("COMMIT", driver.commit)
        except BaseException:
            if driver.in_transaction:
                on_driver("ROLLBACK", driver.rollback)
            ended(wrote=False)
            raise
        ended(wrote=wrote)
    else:
        ended(wrote=False)
        on_driver("ROLLBACK", driver.rollback)
