"""Migration 0006 on a database that already holds outbox rows: each row gets its device's user."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import insert, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from tapgate.adapters.store import tables as t
from tapgate.adapters.store.migrate import MIGRATIONS, migrate
from tapgate.adapters.store.urls import engine_url
from tests.conftest import ADMIN_URL, PostgresDatabase

AT = datetime(2026, 1, 1, tzinfo=UTC)
ROWS = [  # tenant, user, device uid, delivery id
    ("acme", "ana", "00000000000000a1", "push-a"),
    ("acme", "bob", "00000000000000b1", "push-b"),
    ("umbrella", "ana", "00000000000000c1", "push-c"),
]


async def _at_0004_with_outbox_rows(url: str) -> None:
    """Migrate ``url`` to revision 0005 and write a tenant, users, devices and an outbox row each."""

    def upgrade(sync: object) -> None:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = sync
        command.upgrade(config, "0005")

    engine = create_async_engine(engine_url(url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(upgrade)
        async with engine.begin() as conn:
            for tenant in sorted({row[0] for row in ROWS}):
                await conn.execute(insert(t.tenants).values(tenant_id=tenant, name=tenant, created_at=AT))
            for tenant, user, uid, delivery in ROWS:
                await conn.execute(
                    insert(t.users).values(tenant_id=tenant, user_id=user, display_name=user, created_at=AT)
                )
                await conn.execute(
                    insert(t.devices).values(
                        tenant_id=tenant,
                        device_uid=uid,
                        user_id=user,
                        device_id="phone",
                        name="Phone",
                        kind="phone",
                        alg="ed25519",
                        public_key="AAAA",
                        status="active",
                        push_kind="fcm",
                        push_token="token",
                        created_at=AT,
                    )
                )
                # Only the columns revision 0005 has: the row as an older tapgate wrote it.
                await conn.execute(
                    insert(t.push_outbox).values(
                        tenant_id=tenant,
                        delivery_id=delivery,
                        device_uid=uid,
                        event="invocation.pending",
                        subject_id="inv-1",
                        status="queued",
                        attempts=0,
                        not_before=AT,
                        created_at=AT,
                    )
                )
    finally:
        await engine.dispose()


async def _users_of_rows(url: str) -> set[tuple[str, str, str]]:
    engine = create_async_engine(engine_url(url))
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(text("SELECT tenant_id, delivery_id, user_id FROM push_outbox"))
            return {(r.tenant_id, r.delivery_id, r.user_id) for r in rows}
    finally:
        await engine.dispose()


EXPECTED = {(tenant, delivery, user) for tenant, user, _, delivery in ROWS}


async def test_migrating_sqlite_from_0004_gives_each_outbox_row_its_devices_user(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    await _at_0004_with_outbox_rows(url)
    await migrate(url)
    assert await _users_of_rows(url) == EXPECTED


@pytest.fixture
async def old_postgres(postgres: PostgresDatabase) -> AsyncIterator[tuple[str, str]]:
    """A throwaway database (the app's URL and the admin's URL to it), dropped after the test."""
    suffix = secrets.token_hex(4)
    name, role = f"tapgate_old_{suffix}", f"tapgate_old_app_{suffix}"
    admin = await asyncpg.connect(ADMIN_URL, timeout=5)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        url = make_url(ADMIN_URL)
        admin_url = url.set(database=name).render_as_string(hide_password=False)
        app_url = url.set(username=role, password=None, database=name).render_as_string(hide_password=False)
        yield app_url, admin_url
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()


@pytest.mark.postgres
async def test_migrating_postgresql_from_0004_gives_every_tenants_outbox_rows_their_devices_user(
    old_postgres: tuple[str, str],
) -> None:
    app_url, admin_url = old_postgres
    await _at_0004_with_outbox_rows(admin_url)
    await migrate(app_url, ADMIN_URL)  # past row-level security: the migrating role fills every tenant's
    assert await _users_of_rows(admin_url) == EXPECTED
