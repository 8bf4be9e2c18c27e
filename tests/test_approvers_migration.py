"""Migration 0013 on a database that already holds devices: every device of kind ``phone``, in every
tenant, declares ``approvals`` and is granted it; no other device is made an approver."""

from __future__ import annotations

import json
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
from tapgate.domain.devices import APPROVALS, BUILTINS, parse_capability
from tests.conftest import ADMIN_URL, PostgresDatabase
from tests.world import LAMP

AT = datetime(2026, 1, 1, tzinfo=UTC)
SMS = {"name": "sms_send", "kind": "actuator", "description": "", "params": {}, "confirm": False}
DEVICES = [  # tenant, user, device uid, kind, capabilities as (entry, granted)
    ("acme", "ana", "00000000000000a1", "phone", [(SMS, True)]),
    ("acme", "ana", "00000000000000a2", "lamp", [(LAMP, True)]),
    ("acme", "bob", "00000000000000b1", "phone", [(BUILTINS[APPROVALS].as_dict(), False)]),
    ("acme", "bob", "00000000000000b2", "laptop", [(BUILTINS[APPROVALS].as_dict(), False)]),
    ("umbrella", "ana", "00000000000000c1", "phone", []),
]


async def _at_0012_with_devices(url: str) -> None:
    def upgrade(sync: object) -> None:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = sync
        command.upgrade(config, "0012")

    engine = create_async_engine(engine_url(url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(upgrade)
        async with engine.begin() as conn:
            for tenant in sorted({row[0] for row in DEVICES}):
                await conn.execute(insert(t.tenants).values(tenant_id=tenant, name=tenant, created_at=AT))
            for tenant, user in sorted({(row[0], row[1]) for row in DEVICES}):
                await conn.execute(
                    insert(t.users).values(tenant_id=tenant, user_id=user, display_name=user, created_at=AT)
                )
            for tenant, user, uid, kind, capabilities in DEVICES:
                await conn.execute(
                    insert(t.devices).values(
                        tenant_id=tenant,
                        device_uid=uid,
                        user_id=user,
                        device_id=f"{kind}-{uid[-2:]}",
                        name=kind.capitalize(),
                        kind=kind,
                        alg="ed25519",
                        public_key="AAAA",
                        status="active",
                        created_at=AT,
                    )
                )
                for position, (entry, granted) in enumerate(capabilities):
                    await conn.execute(
                        insert(t.capabilities).values(
                            tenant_id=tenant,
                            device_uid=uid,
                            name=entry["name"],
                            position=position,
                            definition=json.dumps(entry),
                            granted=granted,
                        )
                    )
    finally:
        await engine.dispose()


async def _capabilities(url: str) -> dict[str, list[tuple[str, int, bool]]]:
    engine = create_async_engine(engine_url(url))
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT device_uid, name, position, definition, granted FROM capabilities")
            )
            found: dict[str, list[tuple[str, int, bool]]] = {}
            for r in rows:
                if r.name == APPROVALS:
                    # what the migration wrote reads back as the built-in (later labels included)
                    stored = parse_capability(json.loads(r.definition), "stored").capability
                    assert stored == BUILTINS[APPROVALS]
                    assert json.loads(r.definition)["description"] == BUILTINS[APPROVALS].description
                found.setdefault(r.device_uid, []).append((r.name, r.position, bool(r.granted)))
            return {uid: sorted(caps, key=lambda c: c[1]) for uid, caps in found.items()}
    finally:
        await engine.dispose()


EXPECTED = {
    "00000000000000a1": [("sms_send", 0, True), ("approvals", 1, True)],
    "00000000000000a2": [("set_light", 0, True)],
    "00000000000000b1": [("approvals", 0, True)],
    "00000000000000b2": [("approvals", 0, False)],  # a laptop that declares it: the person grants it
    "00000000000000c1": [("approvals", 0, True)],
}


async def test_migrating_sqlite_to_0013_makes_every_phone_an_approver_and_no_other_device(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    await _at_0012_with_devices(url)
    await migrate(url)
    assert await _capabilities(url) == EXPECTED


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
async def test_migrating_postgresql_to_0013_makes_every_tenants_phones_approvers_and_no_other_device(
    old_postgres: tuple[str, str],
) -> None:
    app_url, admin_url = old_postgres
    await _at_0012_with_devices(admin_url)
    await migrate(app_url, ADMIN_URL)  # past row-level security: every tenant's phones
    assert await _capabilities(admin_url) == EXPECTED
