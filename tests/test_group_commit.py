"""SQLite's units of work that end close together share one commit (``adapters/store/sqlite.py``): each
returns only once its writes are durable, one that fails takes back its own writes only, a commit that
fails fails every unit of work that waited for it, and the wakes of a unit of work whose caller gave up
meanwhile still go out with the commit."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
from sqlalchemy import text

from tapgate.adapters.store.counting import COUNTS
from tapgate.adapters.store.sql import SqlStore, open_sql_store
from tapgate.domain.accounts import User
from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import StorageError
from tapgate.services.journal import verify_audit
from tests.test_kept_heads import actions, write
from tests.test_store_contract_ports import NOW, _world

CALLS = 64  # more than SqliteDatabase.PROBE: a group forms among units of work all ready at once


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[SqlStore]:
    sql = open_sql_store(sqlite_url)
    try:
        yield sql
    finally:
        await sql.close()


def committed(sqlite_url: str, tenant: str) -> list[str]:
    """The tenant's journal as another connection sees it (a ``tapgate`` command): what is committed."""
    with contextlib.closing(sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))) as other:
        rows = other.execute("SELECT action FROM audit_entries WHERE tenant_id = ? ORDER BY seq", (tenant,))
        return [action for (action,) in rows]


async def test_units_of_work_that_end_together_share_a_commit_and_each_returns_once_it_is_durable(
    store: SqlStore, sqlite_url: str
) -> None:
    tenant = await _world(store)
    durable: dict[int, bool] = {}

    async def call(n: int) -> None:
        await write(store, tenant, f"call {n}")
        durable[n] = f"call {n}" in committed(sqlite_url, tenant)

    before = COUNTS.writing
    await asyncio.gather(*(call(n) for n in range(CALLS)))
    assert durable == dict.fromkeys(range(CALLS), True)
    assert COUNTS.writing - before < CALLS / 2  # most of them shared a commit
    assert sorted(await actions(store, tenant)) == sorted(f"call {n}" for n in range(CALLS))
    assert await verify_audit(store, tenant) == CALLS
    async with store.unit_of_work(tenant) as uow:
        assert [e.seq for e in await uow.events.read("ana", 0, 100)] == list(range(1, CALLS + 1))


async def test_a_unit_of_work_that_fails_in_a_group_takes_back_its_own_writes_only(
    store: SqlStore, sqlite_url: str
) -> None:
    tenant = await _world(store)

    async def failing_after_a_write() -> None:
        async with store.unit_of_work(tenant) as uow:
            await uow.users.add(User(tenant, "ghost", "Ghost", NOW))  # written at once
            await uow.journal.append(AuditRecord("rolled back", "test"), NOW)
            raise RuntimeError("the use case failed")

    before = COUNTS.writing
    calls = [failing_after_a_write() if n == 40 else write(store, tenant, f"call {n}") for n in range(CALLS)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[40], RuntimeError)
    assert not any(isinstance(r, BaseException) for n, r in enumerate(results) if n != 40)
    assert COUNTS.writing - before < CALLS / 2  # the failing one was in a group
    assert sorted(committed(sqlite_url, tenant)) == sorted(f"call {n}" for n in range(CALLS) if n != 40)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.users.get("ghost") is None
    assert await verify_audit(store, tenant) == CALLS - 1
    await write(store, tenant, "after")
    assert await verify_audit(store, tenant) == CALLS


async def test_a_commit_that_fails_fails_every_unit_of_work_that_waited_for_it(
    store: SqlStore, sqlite_url: str
) -> None:
    tenant = await _world(store)

    async def breaking() -> None:
        """Journals, and writes an event of no one's, checked only at the commit: the commit fails."""
        async with store.unit_of_work(tenant) as uow:
            await uow.journal.append(AuditRecord("breaks the commit", "test"), NOW)
            driver = uow.conn.driver  # type: ignore[attr-defined]
            driver.execute("PRAGMA defer_foreign_keys = ON")
            driver.execute(
                "INSERT INTO events (tenant_id, seq, user_id, type, data, created_at) "
                "VALUES (?, 9999, 'nobody', 'test', '{}', '2026-01-01 00:00:00')",
                (tenant,),
            )

    calls = [breaking() if n == 40 else write(store, tenant, f"call {n}") for n in range(CALLS)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    failed = [n for n, r in enumerate(results) if isinstance(r, StorageError)]
    assert 40 in failed and len(failed) > CALLS / 2  # the group around it
    assert all(isinstance(r, int | StorageError) for r in results)  # a write, or the group's failure
    kept = [f"call {n}" for n, r in enumerate(results) if isinstance(r, int)]
    assert committed(sqlite_url, tenant) == kept  # no write of a failed one, and nothing numbered twice
    await write(store, tenant, "after")  # the next transaction begins afresh, from the committed head
    assert committed(sqlite_url, tenant) == [*kept, "after"]
    assert await verify_audit(store, tenant) == len(kept) + 1


async def test_the_wakes_of_a_unit_of_work_whose_caller_was_cancelled_go_out_with_the_commit(
    store: SqlStore, sqlite_url: str
) -> None:
    tenant = await _world(store)
    woken: list[str | None] = []
    store.wake.listen(woken.append)

    async def call(n: int) -> None:
        async with store.unit_of_work(tenant) as uow:
            await uow.journal.append(AuditRecord(f"call {n}", "test"), NOW)
            uow.notify(f"key {n}")

    tasks = [asyncio.create_task(call(n)) for n in range(CALLS)]
    await asyncio.sleep(0)  # one turn of the loop: each has run up to its commit, the last ones to a group's
    waiting = [n for n, task in enumerate(tasks) if not task.done()]
    assert CALLS - 1 in waiting  # a group is waiting for its commit
    tasks[CALLS - 1].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[CALLS - 1], asyncio.CancelledError)
    assert f"call {CALLS - 1}" in committed(sqlite_url, tenant)  # it was committed all the same
    assert f"key {CALLS - 1}" in woken  # and those waiting on its key were woken
    assert sorted(k for k in woken if k is not None) == sorted(f"key {n}" for n in range(CALLS))


async def test_closing_the_store_commits_the_group_that_waits(sqlite_url: str) -> None:
    store = open_sql_store(sqlite_url)
    tenant = await _world(store)
    tasks = [asyncio.create_task(write(store, tenant, f"call {n}")) for n in range(CALLS)]
    await asyncio.sleep(0)  # one turn of the loop: the last ones wait for their group's commit
    assert not tasks[-1].done()
    await store.close()  # a server stopping
    await asyncio.gather(*tasks)
    assert sorted(committed(sqlite_url, tenant)) == sorted(f"call {n}" for n in range(CALLS))


async def test_writes_through_sqlalchemy_in_a_group_commit_with_it_or_are_taken_back(
    store: SqlStore, sqlite_url: str
) -> None:
    """A unit of work whose statements are not hot ones goes through SQLAlchemy, which then ends the
    transaction itself: in a group its writes commit with the group's, and one that fails after them
    takes back its own only."""
    tenant = await _world(store)

    async def renaming(name: str, fails: bool) -> None:
        async with store.unit_of_work(tenant) as uow:
            await uow.conn.execute(
                text("UPDATE users SET display_name = :name WHERE tenant_id = :tenant"),
                {"name": name, "tenant": tenant},
            )
            if fails:
                raise RuntimeError("the use case failed")

    def call(n: int) -> Coroutine[Any, Any, object]:
        if n == 30:
            return renaming("Ana Two", fails=False)
        if n == 40:  # after it, in a group
            return renaming("Nobody", fails=True)
        return write(store, tenant, f"call {n}")  # journals, on hot statements

    results = await asyncio.gather(*(call(n) for n in range(CALLS)), return_exceptions=True)
    assert isinstance(results[40], RuntimeError)
    assert not any(isinstance(r, BaseException) for n, r in enumerate(results) if n != 40)
    journalled = [f"call {n}" for n in range(CALLS) if n not in (30, 40)]
    assert sorted(committed(sqlite_url, tenant)) == sorted(journalled)
    with contextlib.closing(sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))) as other:
        names = other.execute("SELECT display_name FROM users WHERE tenant_id = ?", (tenant,)).fetchall()
    assert names == [("Ana Two",)]
    await write(store, tenant, "after")
    assert await verify_audit(store, tenant) == CALLS - 1


async def test_units_of_work_queued_on_the_store_join_the_open_group(store: SqlStore) -> None:
    """A unit of work that awaits something that suspends keeps the store to itself meanwhile, and the
    units of work that come then queue for it. Each of those resumes a turn of the loop after the one
    before it let go, so a group's commit scheduled for the next turn would run alone every time, and the
    queue, fed by each caller's next unit of work, would never drain. Units of work queued on the store
    join the open group instead: group commit holds while they queue, and after."""
    tenant = await _world(store)
    workers, each = 32, 10

    async def suspending() -> None:
        async with store.unit_of_work(tenant) as uow:
            await uow.journal.append(AuditRecord("suspended", "test"), NOW)
            await asyncio.sleep(0)  # what no unit of work of the gateway's does: the others queue

    async def worker(n: int) -> None:
        for k in range(each):
            if n == 0 and k == 0:
                await suspending()
            else:
                await write(store, tenant, f"call {n}.{k}")

    before = COUNTS.writing
    await asyncio.gather(*(worker(n) for n in range(workers)))
    assert COUNTS.writing - before < workers * each / 4  # most of them shared a commit
    assert await verify_audit(store, tenant) == workers * each
