"""The PostgreSQL store keeps the connections it opened (adapters/store/sql.py): a second peak of load
reuses them instead of opening new server processes, and no more than the pool's size are ever open."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from tapgate.adapters.store.sql import open_sql_store
from tests.conftest import PostgresDatabase

pytestmark = pytest.mark.postgres

POOL = 20


async def _peak(store: object, users: int) -> set[int]:
    """``users`` transactions at once, each holding its connection until all have started or the pool
    is exhausted; the server processes that served them."""
    engine = store.engine  # type: ignore[attr-defined]
    started = 0
    everyone = asyncio.Event()

    async def one() -> int:
        nonlocal started
        async with engine.connect() as conn:
            pid = int(await conn.scalar(text("SELECT pg_backend_pid()")))
            started += 1
            if started >= min(users, POOL):
                everyone.set()
            await everyone.wait()
            return pid

    return set(await asyncio.wait_for(asyncio.gather(*(one() for _ in range(users))), timeout=60))


async def test_a_second_peak_reuses_the_connections_of_the_first(postgres: PostgresDatabase) -> None:
    store = open_sql_store(postgres.app_url)
    try:
        first = await _peak(store, POOL + 5)  # more than the pool: some wait their turn
        second = await _peak(store, POOL + 5)
        assert len(first) == POOL
        assert second == first  # no connection was closed and opened again
    finally:
        await store.close()
