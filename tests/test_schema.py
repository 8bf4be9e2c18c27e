"""The migrations build exactly the tables the code describes, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from tapgate.adapters.store.tables import metadata
from tapgate.adapters.store.urls import engine_url
from tests.conftest import PostgresDatabase


async def _differences(url: str) -> list[object]:
    engine = create_async_engine(engine_url(url))
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda sync: compare_metadata(MigrationContext.configure(sync), metadata)
            )
    finally:
        await engine.dispose()


async def test_the_sqlite_schema_matches_the_tables(sqlite_url: str) -> None:
    assert await _differences(sqlite_url) == []


@pytest.mark.postgres
async def test_the_postgresql_schema_matches_the_tables(postgres: PostgresDatabase) -> None:
    assert await _differences(postgres.admin_url) == []
