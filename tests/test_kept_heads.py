"""SQLite's store keeps the chain heads it committed (``sql_journal.KeptHeads``): a unit of work that
journals takes its tenant's head from there, not from a read, while no other connection has written the
file since; a write by another connection (a ``tapgate`` command on the same file) is seen before the next
entry is numbered, and the journal and the events stay exact."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tapgate.adapters.store.counting import COUNTS
from tapgate.adapters.store.sql import SqlStore, open_sql_store
from tapgate.domain.audit import AuditRecord
from tapgate.services.journal import read_audit, verify_audit
from tests.test_store_contract_ports import NOW, _world


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[SqlStore]:
    sql = open_sql_store(sqlite_url)
    try:
        yield sql
    finally:
        await sql.close()


async def write(store: SqlStore, tenant: str, action: str) -> int:
    """Journal ``action`` with an event; the statements the unit of work ran."""
    before = COUNTS.statements
    async with store.unit_of_work(tenant) as uow:
        await uow.journal.append(AuditRecord(action, "test"), NOW)
        await uow.events.append("ana", action, {"n": action}, NOW)
    return COUNTS.statements - before


async def failing(store: SqlStore, tenant: str) -> None:
    """A unit of work that journals, then fails before it commits."""
    async with store.unit_of_work(tenant) as uow:
        await uow.journal.append(AuditRecord("rolled back", "test"), NOW)
        raise RuntimeError("the use case failed")


async def actions(store: SqlStore, tenant: str) -> list[str]:
    return [entry.action for entry in await read_audit(store, tenant, after=0, limit=100)]


async def test_a_writer_takes_the_head_its_connection_committed_last_without_reading_it(
    store: SqlStore,
) -> None:
    tenant = await _world(store)
    first = await write(store, tenant, "one")  # reads the head: nothing kept for this tenant yet
    second = await write(store, tenant, "two")
    assert second == first - 1  # both looked at the file's data version; only the first read the head
    assert await actions(store, tenant) == ["one", "two"]
    assert await verify_audit(store, tenant) == 2


async def test_a_commit_by_another_connection_is_seen_before_the_next_entry_is_numbered(
    store: SqlStore, sqlite_url: str
) -> None:
    tenant = await _world(store)
    await write(store, tenant, "one")
    other = open_sql_store(sqlite_url)  # another process on the same file: a `tapgate` command
    try:
        await write(other, tenant, "from another connection")
    finally:
        await other.close()
    await write(store, tenant, "two")  # its kept head is stale: it reads the head again
    await write(store, tenant, "three")
    assert await actions(store, tenant) == ["one", "from another connection", "two", "three"]
    assert await verify_audit(store, tenant) == 4
    async with store.unit_of_work(tenant) as uow:
        assert [e.seq for e in await uow.events.read("ana", 0, 10)] == [1, 2, 3, 4]


async def test_a_unit_of_work_that_does_not_commit_leaves_the_chain_where_the_last_commit_left_it(
    store: SqlStore,
) -> None:
    tenant = await _world(store)
    await write(store, tenant, "one")
    with pytest.raises(RuntimeError):
        await failing(store, tenant)
    await write(store, tenant, "two")
    assert await actions(store, tenant) == ["one", "two"]
    assert await verify_audit(store, tenant) == 2


async def test_tenants_keep_heads_of_their_own(store: SqlStore) -> None:
    first, second = await _world(store), await _world(store)
    for n in range(3):
        await write(store, first, f"first {n}")
        await write(store, second, f"second {n}")
    assert await verify_audit(store, first) == 3 and await verify_audit(store, second) == 3
    assert await actions(store, second) == ["second 0", "second 1", "second 2"]
