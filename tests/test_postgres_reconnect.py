"""A pooled PostgreSQL connection the server closed (a restart, an idle timeout) costs no request: the
store pings nobody before a transaction, and a connection found dead at its first statement is replaced
and the transaction begun again on a fresh one."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest
from sqlalchemy import text

from tapgate.adapters.store.sql import open_sql_store
from tapgate.domain.accounts import Tenant
from tests.conftest import PostgresDatabase, tenant_name

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.postgres
async def test_a_unit_of_work_on_a_connection_the_server_closed_commits_on_a_fresh_one(
    postgres: PostgresDatabase,
) -> None:
    store = open_sql_store(postgres.app_url, pool_size=1)
    try:
        assert store.engine is not None
        async with store.engine.connect() as conn:  # the pool's one connection
            pid = await conn.scalar(text("SELECT pg_backend_pid()"))
        admin = await asyncpg.connect(postgres.admin_url)
        try:
            # With a timeout, PostgreSQL answers once the backend has really ended.
            assert await admin.fetchval("SELECT pg_terminate_backend($1, 60000)", pid)
        finally:
            await admin.close()
        tenant = tenant_name()
        async with store.unit_of_work(tenant) as uow:
            await uow.tenants.add(Tenant(tenant, tenant, NOW))
        async with store.unit_of_work(tenant) as uow:
            assert await uow.tenants.get() is not None
    finally:
        await store.close()
