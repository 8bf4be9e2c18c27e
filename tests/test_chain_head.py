"""No tenant-wide lock (DESIGN §16): on PostgreSQL a writer never takes the tenant's chain head, nor waits
for a reader or the sealer that holds it; what it writes is sealed later, in commit order, and the journal
and the event stream stay exact (``adapters/store/sql_journal.py``).

Each test would fail on the design it replaced: there every writer waited for the head row (the first
test's writer would time out), and the races below would still pass, so they are the safety net, not the
proof.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tapgate.adapters.store.counting import COUNTS
from tapgate.adapters.store.sql import SqlStore, open_sql_store
from tapgate.adapters.store.sql_journal import _end_statement
from tapgate.domain.audit import AuditRecord
from tapgate.ports import Store, UnitOfWork
from tapgate.services.journal import read_audit, verify_audit
from tests.conftest import PostgresDatabase
from tests.test_store_contract_ports import NOW, _world

pytestmark = pytest.mark.postgres

WAIT = 30  # seconds a step may take on a busy machine before the test calls it stuck


@pytest.fixture
async def store(postgres: PostgresDatabase) -> AsyncIterator[SqlStore]:
    sql = open_sql_store(postgres.app_url)
    try:
        yield sql
    finally:
        await sql.close()


@contextlib.asynccontextmanager
async def holding_the_head(store: Store, tenant: str, action: str) -> AsyncIterator[UnitOfWork]:
    """A unit of work that has journalled ``action`` and read the journal's head, and so holds the tenant's
    head until the block ends (a writer alone never takes it: it leaves its entries pending)."""
    async with store.unit_of_work(tenant) as uow:
        await uow.journal.append(AuditRecord(action, "test"), NOW)
        await uow.journal.head()  # seals what is pending, its own entry included: it holds the head now
        yield uow


async def write(store: Store, tenant: str, action: str) -> None:
    async with store.unit_of_work(tenant) as uow:
        await uow.journal.append(AuditRecord(action, "test"), NOW)
        await uow.events.append("ana", action, {"n": action}, NOW)


async def pending(url: str, tenant: str) -> int:
    """Rows of the tenant still waiting to be sealed, counted beside the store on a connection of the app."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        async with conn.transaction():
            await conn.execute("SELECT set_config('app.tenant_id', $1, true)", tenant)
            audit = await conn.fetchval("SELECT count(*) FROM audit_pending")
            events = await conn.fetchval("SELECT count(*) FROM events_pending")
            return int(audit) + int(events)
    finally:
        await conn.close()


async def actions(store: Store, tenant: str) -> list[str]:
    return [e.action for e in await read_audit(store, tenant, 0, 1000)]


async def events(store: Store, tenant: str) -> list[tuple[int, str]]:
    async with store.unit_of_work(tenant) as uow:
        return [(e.seq, e.type) for e in await uow.events.read("ana", 0, 1000)]


async def test_a_writer_does_not_wait_for_the_head_another_transaction_holds(
    store: SqlStore, postgres: PostgresDatabase
) -> None:
    tenant = await _world(store)
    async with holding_the_head(store, tenant, "first.held"):
        # The old design: this waited for the head row until the block above ended, which it never would.
        await asyncio.wait_for(write(store, tenant, "second.beside"), WAIT)
        assert await pending(postgres.app_url, tenant) == 2  # committed, not yet numbered
    assert await asyncio.wait_for(verify_audit(store, tenant), WAIT) == 2
    assert await actions(store, tenant) == ["first.held", "second.beside"]  # the order they became visible
    assert await events(store, tenant) == [(1, "second.beside")]
    assert await pending(postgres.app_url, tenant) == 0


async def test_the_sealer_seals_what_a_writer_left_pending_without_anyone_reading(
    store: SqlStore, postgres: PostgresDatabase
) -> None:
    tenant = await _world(store)
    async with holding_the_head(store, tenant, "first.held"):
        await asyncio.wait_for(write(store, tenant, "second.beside"), WAIT)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while await pending(postgres.app_url, tenant):  # nobody reads: the store's sealer must do it
        assert loop.time() < deadline, "the pending rows were never sealed"
        await asyncio.sleep(0.05)
    conn = await asyncpg.connect(postgres.app_url, timeout=5)
    try:
        async with conn.transaction():
            await conn.execute("SELECT set_config('app.tenant_id', $1, true)", tenant)
            rows = await conn.fetch("SELECT seq, action FROM audit_entries ORDER BY seq")
            head = await conn.fetchrow("SELECT seq, event_seq FROM audit_heads")
    finally:
        await conn.close()
    assert [(r["seq"], r["action"]) for r in rows] == [(1, "first.held"), (2, "second.beside")]
    assert (head["seq"], head["event_seq"]) == (2, 1)


async def test_a_reader_sees_every_committed_entry_even_while_the_head_is_held(
    store: SqlStore, postgres: PostgresDatabase
) -> None:
    tenant = await _world(store)
    async with holding_the_head(store, tenant, "first.held") as holder:
        await asyncio.wait_for(write(store, tenant, "second.beside"), WAIT)
        # A reader must see the committed event, so it waits for the head and seals it: it cannot
        # answer before the holder commits.
        reading = asyncio.ensure_future(events(store, tenant))
        await holder.events.append("ana", "first.held", {}, NOW)
    seen = await asyncio.wait_for(reading, WAIT)
    assert seen == [(1, "first.held"), (2, "second.beside")]


async def test_a_crash_between_commit_and_seal_loses_nothing(postgres: PostgresDatabase) -> None:
    """A writer commits while another transaction holds the head, and then its process dies, sealer and
    all; the holder's transaction dies too. A fresh store (another process, after a restart) finds the
    writer's entry and event, numbered and chained."""
    holder, writer = open_sql_store(postgres.app_url), open_sql_store(postgres.app_url)
    tenant = await _world(holder)
    try:
        with contextlib.suppress(RuntimeError):
            async with holding_the_head(holder, tenant, "lost.with.its.transaction"):
                await asyncio.wait_for(write(writer, tenant, "committed.while.held"), WAIT)
                await writer.close()  # the writer's process ends before its sealer could take the head
                assert await pending(postgres.app_url, tenant) == 2
                raise RuntimeError("the holder dies")  # its transaction rolls back
    finally:
        await holder.close()
    assert await pending(postgres.app_url, tenant) == 2
    after = open_sql_store(postgres.app_url)
    try:
        assert await asyncio.wait_for(verify_audit(after, tenant), WAIT) == 1
        assert await actions(after, tenant) == ["committed.while.held"]
        assert await events(after, tenant) == [(1, "committed.while.held")]
    finally:
        await after.close()


async def test_many_writers_and_a_follower_agree_on_one_exact_order(
    store: SqlStore, postgres: PostgresDatabase
) -> None:
    """Forty writers on ten pooled connections, most finding the head held, and a follower reading the
    event stream with its cursor the whole time: every entry is chained once, every event numbered once
    with no gap, and the follower sees each exactly once, in order."""
    tenant = await _world(store)
    writers = 40
    followed: list[tuple[int, str]] = []
    done = asyncio.Event()

    async def follow() -> None:
        after = 0
        while True:
            finished = done.is_set()
            async with store.unit_of_work(tenant) as uow:
                page = [(e.seq, e.type) for e in await uow.events.read("ana", after, 100)]
            followed.extend(page)
            after = page[-1][0] if page else after
            if finished and not page:
                return
            await asyncio.sleep(0)

    follower = asyncio.ensure_future(follow())
    await asyncio.wait_for(asyncio.gather(*(write(store, tenant, f"w{n}") for n in range(writers))), WAIT * 2)
    done.set()
    await asyncio.wait_for(follower, WAIT)
    assert await asyncio.wait_for(verify_audit(store, tenant), WAIT) == writers
    assert sorted(await actions(store, tenant)) == sorted(f"w{n}" for n in range(writers))
    assert [seq for seq, _ in followed] == list(range(1, writers + 1))
    assert sorted(kind for _, kind in followed) == sorted(f"w{n}" for n in range(writers))


async def test_the_sealer_seals_a_steady_stream_of_writes_in_batches_not_one_by_one(
    store: SqlStore, postgres: PostgresDatabase
) -> None:
    """Every write leaves its rows pending and marks its tenant; the sealer seals a marked tenant once a
    ``DELAY``, however many writes came meanwhile. (A sealer that kept sealing while marks kept coming
    sealed about once a write: as many transactions again.)"""
    tenant = await _world(store)
    loop = asyncio.get_running_loop()
    started, before, writes = loop.time(), COUNTS.transactions, 0
    while writes < 60 or (loop.time() - started < 2.5 * store._sealer.DELAY and writes < 500):
        await asyncio.wait_for(write(store, tenant, f"w{writes}"), WAIT)
        writes += 1
    extra = COUNTS.transactions - before - writes
    passes_at_most = (loop.time() - started) / store._sealer.DELAY + 2
    assert extra <= passes_at_most, (
        f"{extra} transactions beside {writes} writes in {passes_at_most - 2:.1f} delays"
    )
    assert await asyncio.wait_for(verify_audit(store, tenant), WAIT) == writes
    assert await events(store, tenant) == [(n + 1, f"w{n}") for n in range(writes)]


async def test_every_shape_of_the_end_statement_writes_each_part_where_it_belongs(
    store: SqlStore, postgres: PostgresDatabase
) -> None:
    """A PostgreSQL unit of work ends with one statement made of only the parts it has rows for
    (``sql_journal._end_statement``). Every one of the 128 shapes (each part in or out, the notifications,
    a held row) is run here with its places numbered as ``ChainHead`` fills them, in a transaction rolled
    back: each table gets exactly its part's rows, the head moves only with its part, and the wake
    notifications are sent only with theirs."""
    tenant = await _world(store)
    at = NOW
    rows = {  # a part's values, in its places' order, and the table (and rows) it must reach
        "audit": (
            [[7], [at], ["a"], ["actor"], ["ok"], ["s"], [""], ["{}"], ["p" * 64], ["h" * 64]],
            "audit_entries",
        ),
        "events": ([[3], ["ana"], ["e"], ["{}"], [at]], "events"),
        "audit_left": (
            [[at, at], ["a", "b"], ["x", "y"], ["ok", "ok"], ["s", "s"], ["", ""], ["{}", "{}"]],
            "audit_pending",
        ),
        "events_left": ([["ana"], ["e"], ["{}"], [at]], "events_pending"),
        "head": ([41, "z" * 64, 43], None),
    }
    held_sql = "INSERT INTO users (tenant_id, user_id, display_name, created_at) VALUES ($1, $2, $3, $4)"
    conn = await asyncpg.connect(postgres.app_url, timeout=5)
    try:
        for shape in range(2 ** len(rows) * 4):
            parts = tuple(name for n, name in enumerate(rows) if shape >> n & 1)
            notify, held = bool(shape >> len(rows) & 1), bool(shape >> (len(rows) + 1) & 1)
            values: list[object] = [tenant] if parts else []
            for name in parts:
                values += rows[name][0]
            values += ["tapgate_shapes", f"{shape}:", ["k"]] if notify else []
            values += [tenant, f"held-{shape}", "Held", at] if held else []
            sql = _end_statement(parts, notify, held_sql if held else None)
            tr = conn.transaction()
            await tr.start()
            try:
                await conn.execute("SELECT set_config('app.tenant_id', $1, true)", tenant)
                assert await conn.fetchval(sql, *values) == (1 if notify else 0)
                for name, (value, table) in rows.items():
                    if table is not None:
                        found = await conn.fetchval(f"SELECT count(*) FROM {table}")
                        assert found == (len(value[0]) if name in parts else 0), (parts, table)
                head = await conn.fetchrow("SELECT seq, hash, event_seq FROM audit_heads")
                assert (head is not None and tuple(head) == (41, "z" * 64, 43)) == ("head" in parts), parts
                users = await conn.fetchval("SELECT count(*) FROM users WHERE user_id = $1", f"held-{shape}")
                assert users == int(held), parts
            finally:
                await tr.rollback()
    finally:
        await conn.close()
