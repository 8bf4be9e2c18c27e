"""SQLite's WAL is checkpointed on a thread of its own, never in a commit on the event loop
(``adapters/store/sqlite.py``, ``Checkpointer``): the loop's connection does not checkpoint, the thread
copies what was committed into the database file soon after, the WAL starts over under steady load
instead of growing, and closing the store stops the thread and leaves everything in the database file."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path

from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.store.sqlite import Checkpointer
from tests.test_kept_heads import write
from tests.test_store_contract_ports import _world

WAIT = 30  # seconds a step may take on a busy machine before the test calls it stuck
THREAD = "tapgate-sqlite-checkpoint"


def _database_file(sqlite_url: str) -> Path:
    return Path(sqlite_url.removeprefix("sqlite:///"))


def _wal_is_empty(sqlite_url: str) -> bool:
    wal = Path(f"{_database_file(sqlite_url)}-wal")
    return not wal.exists() or os.path.getsize(wal) == 0


def _wal_size(sqlite_url: str) -> int:
    return os.path.getsize(f"{_database_file(sqlite_url)}-wal")


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait, on the loop, until ``condition()`` holds (the thread works beside it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not condition():
        assert loop.time() < deadline, f"still not {what} after {WAIT} s"
        await asyncio.sleep(0.01)


async def test_commits_on_the_loop_leave_the_checkpoints_to_a_thread_that_runs_them_soon_after(
    sqlite_url: str,
) -> None:
    """The rows of many commits reach the database file itself (only a checkpoint writes there), by the
    thread's checkpoints, while the loop's connection is set never to checkpoint."""
    store = open_sql_store(sqlite_url)
    try:
        tenant = await _world(store)
        sqlite = store.sqlite
        assert sqlite is not None
        checkpointer = sqlite.checkpointer
        assert checkpointer is not None
        async with sqlite.reading() as inline:
            assert inline.driver.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        database = _database_file(sqlite_url)
        await _until(lambda: checkpointer.runs > 0, "checkpointed the tenant")
        size = database.stat().st_size
        for n in range(300):  # about a thousand pages of journal, events and indexes
            await write(store, tenant, f"entry {n} " + "x" * 150)
        await _until(lambda: database.stat().st_size > size, "grown in the database file")
        assert any(t.name == THREAD for t in threading.enumerate())
    finally:
        await store.close()


async def test_closing_the_store_stops_the_thread_and_leaves_every_commit_in_the_database_file(
    sqlite_url: str,
) -> None:
    store = open_sql_store(sqlite_url)
    tenant = await _world(store)
    for n in range(50):
        await write(store, tenant, f"entry {n}")
    await store.close()
    assert not any(t.name == THREAD for t in threading.enumerate())
    assert _wal_is_empty(sqlite_url)  # the last connection checkpointed it all


async def test_under_steady_load_the_wal_starts_over_instead_of_growing(sqlite_url: str) -> None:
    """Commits that never pause long enough for a passive checkpoint to copy them all: past the
    checkpointer's frames the next unit of work has it catch up first, and its transaction writes from
    the WAL's start. Without that the WAL holds every frame of the 2,000 commits (some 40 MiB)."""
    store = open_sql_store(sqlite_url)
    try:
        sqlite = store.sqlite
        assert sqlite is not None and sqlite.checkpointer is not None
        sqlite.checkpointer.close()  # the store's own, not started yet: one that starts over sooner
        sqlite.checkpointer = checkpointer = Checkpointer(
            str(_database_file(sqlite_url)), restart=50, gather=0.005
        )
        tenant = await _world(store)
        for n in range(2000):
            await write(store, tenant, f"entry {n}")
        assert checkpointer.restarts > 0
        size = _wal_size(sqlite_url)
        assert size < 12 * 2**20, f"the WAL grew to {size / 2**20:.0f} MiB"
    finally:
        await store.close()
