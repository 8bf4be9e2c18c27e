"""The hot statements sent straight to asyncpg (``postgres_raw.py``) answer exactly what SQLAlchemy answers
for them on PostgreSQL: the same rows with the same Python values, the same counts of changed rows, the
same refusal of a duplicate row; and a unit of work that sends some of them and some through SQLAlchemy
commits all of its rows or none."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import create_async_engine

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.counting import COUNTS
from tapgate.adapters.store.postgres_raw import begin
from tapgate.adapters.store.raw import RawStatements
from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.store.sql_base import insert_into, is_unique_violation
from tapgate.adapters.wake.postgres import CHANNEL
from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import DuplicateInvocation, StorageError
from tapgate.domain.invocations import Status
from tapgate.services.journal import verify_audit
from tests.conftest import PostgresDatabase
from tests.test_sqlite_raw import (
    NOTHING_TO_FIND,
    PARAMETERS,
    STATEMENTS,
    _write_then_fail,
    found,
    rows_to_compare,
)
from tests.test_store_contract_ports import _at, _invocation, _with_device

pytestmark = pytest.mark.postgres
_SET_TENANT = text("SELECT set_config('app.tenant_id', :tenant, true)")


def test_every_hot_statement_is_compiled_for_asyncpg() -> None:
    raw = RawStatements(create_async_engine("postgresql+asyncpg://tapgate@127.0.0.1/tapgate").dialect)
    for name in STATEMENTS:
        assert raw._compile(getattr(q, name), ()) is not None, name


async def test_each_hot_statement_answers_on_asyncpg_what_it_answers_through_sqlalchemy(
    postgres: PostgresDatabase,
) -> None:
    store = open_sql_store(postgres.app_url)
    try:
        tenant = await rows_to_compare(store)
        async with store.unit_of_work(tenant) as uow:
            await uow.events.read("ana", 0, 1)  # seals the event its writer left pending
        assert store.engine is not None and store._raw is not None
        engine, raw = store.engine, store._raw
        async with engine.connect() as conn:
            for name in STATEMENTS:
                statement, parameters = getattr(q, name), PARAMETERS | {"tenant": tenant}
                answers = []
                for direct in (False, True):
                    if direct:  # a unit of work's own connection: hot statements on asyncpg
                        runner: Any = await begin(engine, raw, tenant)
                    else:
                        transaction = await conn.begin()
                        await conn.execute(_SET_TENANT, {"tenant": tenant})
                        runner = conn
                    result = await runner.execute(statement, parameters)
                    rows = [tuple(r) for r in result] if statement.exported_columns else []
                    answers.append((rows, result.rowcount if not rows else None))
                    if direct:
                        await runner.rollback(cancelled=False)
                        await runner.release()
                    else:
                        await transaction.rollback()
                assert answers[1] == answers[0], name
                if name not in NOTHING_TO_FIND:
                    assert found(*answers[0]), f"{name} found nothing to compare"
                for rows, _ in answers:
                    for row in rows:
                        for value in row:
                            assert not isinstance(value, datetime) or value.utcoffset() == UTC.utcoffset(None)
    finally:
        await store.close()


async def test_a_duplicate_row_on_asyncpg_is_sqlalchemys_integrity_error(postgres: PostgresDatabase) -> None:
    store = open_sql_store(postgres.app_url)
    try:
        tenant = await _with_device(store)
        assert store.engine is not None and store._raw is not None
        row = {"tenant_id": tenant, "user_id": "ana", "display_name": "Ana", "created_at": _at(0)}
        conn = await begin(store.engine, store._raw, tenant)
        with pytest.raises(IntegrityError) as refused:
            await conn.execute(insert_into(t.users), row)
        assert is_unique_violation(refused.value)
        await conn.rollback(cancelled=False)
        await conn.release()
    finally:
        await store.close()


@pytest.mark.parametrize("through_sqlalchemy", [False, True])
async def test_a_unit_of_work_on_postgresql_commits_all_of_its_rows_or_none(
    postgres: PostgresDatabase, through_sqlalchemy: bool
) -> None:
    store = open_sql_store(postgres.app_url)
    try:
        tenant = await _with_device(store)
        with pytest.raises(RuntimeError):
            await _write_then_fail(store, tenant, through_sqlalchemy)
        async with store.unit_of_work(tenant) as uow:
            assert await uow.invocations.get("ana", "inv-lost") is None
            assert await uow.pauses.paused_until("ana", "agent") is None
    finally:
        await store.close()


async def test_a_unit_of_work_sets_its_tenant_exactly_whatever_the_tenant_id_holds(
    postgres: PostgresDatabase,
) -> None:
    """The tenant goes into the BEGIN's simple query as a quoted literal: a quote in it stays text."""
    store = open_sql_store(postgres.app_url)
    try:
        assert store.engine is not None and store._raw is not None
        for tenant in ("t-plain", "t-o'brien", "t-'); SELECT pg_sleep(5); --", "t-\\'\\"):
            conn = await begin(store.engine, store._raw, tenant)
            # Not a hot statement: SQLAlchemy's connection joins the transaction begun on asyncpg.
            seen = await conn.scalar(text("SELECT current_setting('app.tenant_id')"))
            await conn.rollback(cancelled=False)
            await conn.release()
            assert seen == tenant
    finally:
        await store.close()


async def test_a_unit_of_work_ends_on_postgresql_in_one_statement_with_its_journal_events_and_wakes(
    postgres: PostgresDatabase,
) -> None:
    """What a writer leaves pending for the chain's holder and the wake notifications are one statement
    at the end, with no take of the head before it: the rows are all there once a reader sealed them,
    chained in the order they were appended, and the notifications reach a listener. A reader that seals
    ends in one statement too: the rows it numbered and the head's move."""
    store = open_sql_store(postgres.app_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    listening = await asyncpg.connect(postgres.app_url, timeout=10)
    await listening.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
    try:
        tenant = await _with_device(store)
        async with store.unit_of_work(tenant) as uow:
            for n in range(3):
                await uow.journal.append(AuditRecord(f"test.entry{n}", "test", data={"n": n}), _at(n))
                await uow.events.append("ana", "test.event", {"n": n, "text": "ünïcode"}, _at(n))
            uow.notify(f"{tenant}:one")
            uow.notify(f"{tenant}:two")
            statements = COUNTS.statements
        assert COUNTS.statements - statements == 1  # the end: entries, events, head, notifications
        got = {(await asyncio.wait_for(heard.get(), 10)).split(" ", 1)[1] for _ in range(2)}
        assert got == {f"{tenant}:one", f"{tenant}:two"}
        async with store.unit_of_work(tenant) as uow:
            statements = COUNTS.statements
            seen = [(e.type, e.data) for e in await uow.events.read("ana", 0, 100)]
            # the head and whether anything is pending, the head held, the pending entries and events
            # taken, the six rows numbered and the head's move written in one statement, the read
            assert COUNTS.statements - statements == 6
            entries = [(e.action, dict(e.data)) for e in await uow.journal.read(0, 100)][-3:]
        assert seen[-3:] == [("test.event", {"n": n, "text": "ünïcode"}) for n in range(3)]
        assert entries == [(f"test.entry{n}", {"n": n}) for n in range(3)]
        assert await verify_audit(store, tenant) >= 3
    finally:
        await listening.close()
        await store.close()


async def test_a_unit_of_works_new_call_goes_in_the_statement_that_ends_it(
    postgres: PostgresDatabase,
) -> None:
    """``PostgresConnection.hold``: an invocation's row is sent with the statement that ends its unit of
    work (one round trip fewer), or before any other statement that comes first, so the unit of work
    reads its own row; its end writes it with the journal's entry, or nothing at all."""
    store = open_sql_store(postgres.app_url)
    created = AuditRecord("invocation.created", "agent:agent", subject="inv-a")

    async def add(invocation_id: str, uid: str = "d" * 16, then_read: bool = False) -> None:
        async with store.unit_of_work(tenant) as uow:
            await uow.invocations.add(_invocation(tenant, invocation_id, uid=uid))
            if then_read:
                await uow.invocations.pending_for(uid, 10)
            await uow.journal.append(AuditRecord("test.never", "test", subject=invocation_id), _at(2))

    try:
        tenant = await _with_device(store)
        async with store.unit_of_work(tenant) as uow:
            statements = COUNTS.statements
            await uow.invocations.add(_invocation(tenant, "inv-a"))
            await uow.journal.append(created, _at(1))
            held = COUNTS.statements - statements
        assert held == 0  # nothing was sent before the end
        async with store.unit_of_work(tenant) as uow:
            await uow.invocations.add(_invocation(tenant, "inv-b"))
            assert await uow.invocations.get("ana", "inv-b") is not None  # sent before the read
        with pytest.raises(DuplicateInvocation):
            await add("inv-a")
        with pytest.raises(DuplicateInvocation):  # found by a statement that is not the end, too
            await add("inv-b", then_read=True)
        with pytest.raises(StorageError, match="does not exist in this tenant"):
            await add("inv-c", uid="e" * 16)  # no such device
        async with store.unit_of_work(tenant) as uow:
            assert [i.invocation_id for i in await uow.invocations.pending_for("d" * 16, 10)] == [
                "inv-a",
                "inv-b",
            ]
            actions = [e.action for e in await uow.journal.read(0, 100)]
        assert actions == ["invocation.created"]  # the failed units of work wrote nothing
        assert await verify_audit(store, tenant) == 1
    finally:
        await store.close()


async def test_a_unit_of_work_cancelled_inside_a_statement_leaves_no_transaction_behind(
    postgres: PostgresDatabase,
) -> None:
    """A unit of work runs on the pooled connection's own driver, so its end is tapgate's: one cancelled
    while a statement waits (here on another's row lock) gives its connection up rather than back to the
    pool mid-statement, commits nothing it wrote, and the pool's next units of work run on good ones."""
    store = open_sql_store(postgres.app_url, pool_size=2)
    try:
        tenant = await _with_device(store)
        async with store.unit_of_work(tenant) as uow:
            await uow.invocations.add(_invocation(tenant, "inv-locked"))
        locked, release = asyncio.Event(), asyncio.Event()
        answered = _invocation(tenant, "inv-locked").answered(Status.DONE, "done", _at(1))

        async def holder() -> None:
            async with store.unit_of_work(tenant) as uow:
                assert await uow.invocations.resolve(answered)  # the row stays locked until commit
                locked.set()
                await release.wait()

        async def waiter() -> None:
            async with store.unit_of_work(tenant) as uow:
                await uow.invocations.add(_invocation(tenant, "inv-never"))
                await uow.invocations.resolve(answered)  # waits on the holder's lock

        holding = asyncio.create_task(holder())
        await locked.wait()
        waiting = asyncio.create_task(waiter())
        admin = await asyncpg.connect(postgres.admin_url)
        try:
            # The waiter is inside its statement, on the lock.
            await _until(
                admin,
                "SELECT count(*) > 0 FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            release.set()
            await holding
            for _ in range(4):  # every connection of the pool, twice
                async with store.unit_of_work(tenant) as uow:
                    assert await uow.invocations.get("ana", "inv-never") is None
                    found = await uow.invocations.get("ana", "inv-locked")
                    assert found is not None and found.status is Status.DONE
            await _until(  # nothing of the cancelled one stays open in the database
                admin,
                "SELECT count(*) = 0 FROM pg_stat_activity"
                " WHERE datname = current_database()"
                " AND (state LIKE 'idle in transaction%' OR wait_event_type = 'Lock')",
            )
        finally:
            await admin.close()
    finally:
        await store.close()


async def _until(admin: asyncpg.Connection, check: str, seconds: float = 60.0) -> None:
    """Wait until ``check`` (a query answering one boolean) is true, asking again every 10 ms."""
    deadline = time.monotonic() + seconds
    while True:
        if await admin.fetchval(check):
            return
        assert time.monotonic() < deadline, f"not true within {seconds:g} s: {check}"
        await asyncio.sleep(0.01)


async def test_a_unit_of_work_cancelled_inside_a_commit_through_sqlalchemy_gives_its_connection_up(
    postgres: PostgresDatabase,
) -> None:
    """A unit of work whose statement went through SQLAlchemy (the sealer's, an administrative write) is
    ended by SQLAlchemy; cancelled while its COMMIT waits (here on a deferred unique check against
    another's uncommitted row), SQLAlchemy has already closed its connection by the time the unit of work
    gives it up, and giving it up again must neither warn nor fail (a server stopping while the sealer
    commits)."""
    admin = await asyncpg.connect(postgres.admin_url)
    holder = await asyncpg.connect(postgres.admin_url)
    store = open_sql_store(postgres.app_url, pool_size=2)
    try:
        await admin.execute("CREATE TABLE commit_waits (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        await admin.execute(f'GRANT INSERT ON commit_waits TO "{postgres.role}"')
        tenant = await _with_device(store)
        holding = holder.transaction()
        await holding.start()
        await holder.execute("INSERT INTO commit_waits VALUES (1)")

        async def committing() -> None:
            async with store.unit_of_work(tenant) as uow:
                await uow.conn.execute(text("INSERT INTO commit_waits VALUES (1)"))  # through SQLAlchemy

        waiting = asyncio.create_task(committing())
        await _until(
            admin,
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database()"
            " AND query = 'COMMIT' AND wait_event_type = 'Lock'",
        )
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await holding.rollback()
        for _ in range(4):  # every connection of the pool, twice
            async with store.unit_of_work(tenant) as uow:
                await uow.journal.append(AuditRecord("after", "test"), datetime.now(UTC))
        assert await verify_audit(store, tenant) == 4
        await _until(
            admin,
            "SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = current_database()"
            " AND (state LIKE 'idle in transaction%' OR wait_event_type = 'Lock')",
        )
    finally:
        await store.close()
        await holder.close()
        await admin.execute("DROP TABLE IF EXISTS commit_waits")  # the database is the session's
        await admin.close()
