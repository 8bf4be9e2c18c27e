"""A reading unit of work on PostgreSQL (``Store.reading``, ``postgres_raw.ReadingConnection``): each read
is one round trip, a transaction of its own that sets its tenant for itself alone. Row-level security
holds every read to that tenant, a pooled connection keeps no tenant after it, and a connection the
server closed, or a function it dropped, costs the read nothing."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from sqlalchemy import text

from tapgate.adapters.store import queries as q
from tapgate.adapters.store.sql import SqlStore, open_sql_store
from tapgate.domain.invocations import Status
from tests.conftest import PostgresDatabase
from tests.test_store_contract_ports import _invocation, _with_device

pytestmark = pytest.mark.postgres

UID = "d" * 16


async def _store_with_a_call(postgres: PostgresDatabase, pool_size: int = 1) -> tuple[SqlStore, str]:
    store = open_sql_store(postgres.app_url, pool_size=pool_size)
    tenant = await _with_device(store, UID)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-a"))
    return store, tenant


async def _backend_pid(store: SqlStore) -> int:
    assert store.engine is not None
    async with store.engine.connect() as conn:  # the pool's one connection
        return int(await conn.scalar(text("SELECT pg_backend_pid()")))


async def test_a_read_runs_alone_and_its_tenant_ends_with_it(postgres: PostgresDatabase) -> None:
    store, tenant = await _store_with_a_call(postgres)
    admin = await asyncpg.connect(postgres.admin_url)
    try:
        pid = await _backend_pid(store)
        async with store.reading(tenant) as uow:
            assert await uow.invocations.get("ana", "inv-a") is not None
            # No transaction stays open around the read: the connection is idle, not idle in one.
            state = await admin.fetchval("SELECT state FROM pg_stat_activity WHERE pid = $1", pid)
            assert state == "idle"
            assert await uow.devices.presence(UID) is not None
        assert store.engine is not None
        async with store.engine.connect() as conn:  # the same pooled connection, a transaction of its own
            assert await conn.scalar(text("SELECT pg_backend_pid()")) == pid
            assert not await conn.scalar(text("SELECT current_setting('app.tenant_id', true)"))
            assert await conn.scalar(text("SELECT count(*) FROM invocations")) == 0  # no tenant: nothing
    finally:
        await admin.close()
        await store.close()


async def test_a_read_sees_its_own_tenants_rows_only(postgres: PostgresDatabase) -> None:
    store, tenant = await _store_with_a_call(postgres)
    try:
        stranger = await _with_device(store, UID)  # another tenant: the same device uid and call id
        async with store.unit_of_work(stranger) as uow:
            await uow.invocations.add(_invocation(stranger, "inv-a"))
        async with store.reading(tenant) as uow:
            mine = await uow.conn.execute(q.INVOCATION, {"tenant": tenant, "user": "ana", "id": "inv-a"})
            assert len(mine.all()) == 1
            # A read that names another tenant finds nothing: row-level security holds it to its own.
            theirs = await uow.conn.execute(q.INVOCATION, {"tenant": stranger, "user": "ana", "id": "inv-a"})
            assert theirs.all() == []
    finally:
        await store.close()


async def test_each_read_sees_what_was_committed_before_it(postgres: PostgresDatabase) -> None:
    store, tenant = await _store_with_a_call(postgres, pool_size=2)
    try:
        async with store.reading(tenant) as uow:
            assert [i.invocation_id for i in await uow.invocations.pending_for(UID, 10)] == ["inv-a"]
            async with store.unit_of_work(tenant) as other:
                await other.invocations.add(_invocation(tenant, "inv-b", at=1))
            assert [i.invocation_id for i in await uow.invocations.pending_for(UID, 10)] == ["inv-a", "inv-b"]
    finally:
        await store.close()


async def test_a_reading_unit_of_work_refuses_to_write(postgres: PostgresDatabase) -> None:
    store, tenant = await _store_with_a_call(postgres)
    try:
        invocation = _invocation(tenant, "inv-a")
        with pytest.raises(TypeError, match="hot reads only"):
            async with store.reading(tenant) as uow:
                await uow.invocations.resolve(invocation.answered(Status.DONE, None, invocation.created_at))
        with pytest.raises(TypeError, match="hot reads only"):
            async with store.reading(tenant) as uow:
                await uow.invocations.add(_invocation(tenant, "inv-b"))
        async with store.reading(tenant) as uow:  # nothing was written
            assert [i.invocation_id for i in await uow.invocations.pending_for(UID, 10)] == ["inv-a"]
    finally:
        await store.close()


async def test_a_read_whose_function_the_session_lost_makes_it_again(postgres: PostgresDatabase) -> None:
    store, tenant = await _store_with_a_call(postgres)
    try:
        async with store.reading(tenant) as uow:
            assert await uow.invocations.get("ana", "inv-a") is not None
        assert store.engine is not None
        async with store.engine.connect() as conn:  # as a pooler resetting the session would
            await conn.execute(text("DISCARD TEMP"))
            await conn.commit()
        async with store.reading(tenant) as uow:
            assert await uow.invocations.get("ana", "inv-a") is not None
    finally:
        await store.close()


async def test_a_read_on_a_connection_the_server_closed_reads_on_a_fresh_one(
    postgres: PostgresDatabase,
) -> None:
    store, tenant = await _store_with_a_call(postgres)
    admin = await asyncpg.connect(postgres.admin_url)
    try:
        async with store.reading(tenant) as uow:  # the function is made on the pool's one connection
            assert await uow.invocations.get("ana", "inv-a") is not None
        pid = await _backend_pid(store)
        # With a timeout, PostgreSQL answers once the backend has really ended.
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 60000)", pid)
        async with store.reading(tenant) as uow:
            assert await uow.invocations.get("ana", "inv-a") is not None
        assert await _backend_pid(store) != pid
    finally:
        await admin.close()
        await store.close()


async def test_a_role_that_may_not_make_temporary_functions_still_reads(
    postgres: PostgresDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    """``tapgate migrate`` grants the app role TEMPORARY on its database; where an operator took it away
    (from the role and from PUBLIC), each read runs in a transaction that sets its tenant instead."""
    admin = await asyncpg.connect(postgres.admin_url)
    try:
        for grantee in (postgres.role, "PUBLIC"):
            await admin.execute(f"REVOKE TEMPORARY ON DATABASE {postgres.name} FROM {grantee}")
        allowed = "SELECT has_database_privilege($1, $2, 'TEMPORARY')"
        assert not await admin.fetchval(allowed, postgres.role, postgres.name)
        store, tenant = await _store_with_a_call(postgres)
        try:
            for _ in range(2):
                async with store.reading(tenant) as uow:
                    assert [i.invocation_id for i in await uow.invocations.pending_for(UID, 10)] == ["inv-a"]
                    assert await uow.invocations.get("bob", "inv-a") is None
            pid = await _backend_pid(store)
            state = await admin.fetchval("SELECT state FROM pg_stat_activity WHERE pid = $1", pid)
            assert state == "idle"  # the read's transaction ended
            assert "may not create temporary functions" in caplog.text
        finally:
            await store.close()
    finally:
        for grantee in (postgres.role, "PUBLIC"):
            await admin.execute(f"GRANT TEMPORARY ON DATABASE {postgres.name} TO {grantee}")
        await admin.close()


async def test_a_read_whose_functions_never_stay_reads_in_a_transaction(postgres: PostgresDatabase) -> None:
    """Behind a pooler that does not keep sessions a function made on one server connection is gone
    on the next: a read whose function is lost twice at once reads in a transaction that sets its
    tenant from then on. Here an event trigger drops every read function as soon as it is made."""
    admin = await asyncpg.connect(postgres.admin_url)
    await admin.execute(
        """
        CREATE FUNCTION test_drop_read_functions() RETURNS event_trigger LANGUAGE plpgsql AS $f$
        DECLARE made record;
        BEGIN
          FOR made IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
            IF made.object_identity LIKE 'pg_temp%tapgate_read_%' THEN
              EXECUTE 'DROP FUNCTION ' || made.object_identity;
            END IF;
          END LOOP;
        END $f$;
        CREATE EVENT TRIGGER test_drop_read_functions ON ddl_command_end WHEN TAG IN ('CREATE FUNCTION')
          EXECUTE FUNCTION test_drop_read_functions();
        """
    )
    try:
        store, tenant = await _store_with_a_call(postgres)
        try:
            for _ in range(2):
                async with store.reading(tenant) as uow:
                    assert [i.invocation_id for i in await uow.invocations.pending_for(UID, 10)] == ["inv-a"]
            made = "SELECT count(*) FROM pg_proc WHERE proname LIKE 'tapgate_read_%'"
            assert await admin.fetchval(made) == 0  # no function stayed: the reads ran without one
        finally:
            await store.close()
    finally:
        await admin.execute("DROP EVENT TRIGGER test_drop_read_functions")
        await admin.execute("DROP FUNCTION test_drop_read_functions()")
        await admin.close()


async def test_a_read_cancelled_inside_its_statement_gives_no_busy_connection_back(
    postgres: PostgresDatabase,
) -> None:
    """A request cancelled while its read waits (here on a lock an operator holds on the table) drops its
    connection rather than giving it back with the statement still running: the pool's next reads, on
    every connection it has, answer."""
    store, tenant = await _store_with_a_call(postgres, pool_size=2)
    admin = await asyncpg.connect(postgres.admin_url)
    try:

        async def read() -> None:
            async with store.reading(tenant) as uow:
                await uow.invocations.get("ana", "inv-a")

        async with admin.transaction():
            await admin.execute("LOCK TABLE invocations IN ACCESS EXCLUSIVE MODE")
            reading = asyncio.create_task(read())
            deadline = time.monotonic() + 60
            while not await admin.fetchval(
                "SELECT count(*) > 0 FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ):
                assert time.monotonic() < deadline, "the read never waited on the lock"
                await asyncio.sleep(0.01)
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
        for _ in range(4):  # every connection of the pool, twice
            async with store.reading(tenant) as uow:
                found = await uow.invocations.get("ana", "inv-a")
            assert found is not None and found.status is Status.PENDING
    finally:
        await admin.close()
        await store.close()
