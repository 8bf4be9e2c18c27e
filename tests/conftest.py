"""Shared fixtures: stores over every engine, a PostgreSQL database per test session, an API client.

PostgreSQL tests need a server: TAPGATE_TEST_POSTGRES_ADMIN (default
postgresql://postgres@127.0.0.1:5432/postgres) names a role that may create databases and roles. Where
none answers, those tests are skipped with that reason, unless TAPGATE_TEST_POSTGRES_REQUIRED is set
(as .ci/run does), which turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest
from hypothesis import settings as hypothesis_settings

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.memory import MemoryStore
from tapgate.adapters.store.migrate import migrate
from tapgate.adapters.store.sql import open_sql_store
from tapgate.bootstrap import build_app
from tapgate.config import Settings
from tapgate.ports import PushSender, Store
from tests.pushfakes import LoopbackServer, PushFakes, new_accounts

pytest_plugins = ["tests.watchdog"]

# Property tests judge what a function answers, never how fast: a busy machine takes one example past
# hypothesis's 200 ms deadline now and then, which says nothing about the code.
hypothesis_settings.register_profile("tapgate", deadline=None)
hypothesis_settings.load_profile("tapgate")
# `make mutation` runs each property test once per mutant it reaches: fewer examples keep that run within
# reach of a shared machine, while the exact-value tests beside them do the killing.
hypothesis_settings.register_profile("mutation", deadline=None, max_examples=20)

T = TypeVar("T")
SENDER_TIMEOUT = 2.0  # seconds a push sender waits in tests (SHORT_TIMEOUT where a fake is slow on purpose)
SHORT_TIMEOUT = 1.0  # the slow push fakes stay slow until the sender gives up: this need only outlast a
# request's way to a fake on a busy machine (at 0.3 s a third attempt once timed out before it arrived)

ADMIN_URL = os.environ.get("TAPGATE_TEST_POSTGRES_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
HOW_TO_GET_POSTGRES = (
    f"PostgreSQL is not reachable at {ADMIN_URL}: start it "
    "(pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start) "
    "or point TAPGATE_TEST_POSTGRES_ADMIN at a superuser URL"
)


@dataclass(frozen=True)
class PostgresDatabase:
    """A throwaway database migrated by ``tapgate migrate``: the app's URL and the admin's URL."""

    app_url: str
    admin_url: str
    name: str
    role: str


def blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to the end on its own loop, even from inside a running one (fixtures)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _server_dsn(database: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + database


async def _reachable() -> bool:
    try:
        conn = await asyncpg.connect(ADMIN_URL, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


async def _drop(database: str, role: str) -> None:
    conn = await asyncpg.connect(ADMIN_URL)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        await conn.execute(f"DROP ROLE IF EXISTS {role}")
    finally:
        await conn.close()


def new_postgres_database() -> Iterator[PostgresDatabase]:
    if not blocking(_reachable()):
        if os.environ.get("TAPGATE_TEST_POSTGRES_REQUIRED"):
            pytest.fail(HOW_TO_GET_POSTGRES)
        pytest.skip(HOW_TO_GET_POSTGRES)
    suffix = secrets.token_hex(4)
    name, role = f"tapgate_test_{suffix}", f"tapgate_app_{suffix}"
    host = ADMIN_URL.split("@", 1)[1].rsplit("/", 1)[0]
    app_url = f"postgresql://{role}@{host}/{name}"
    blocking(migrate(app_url, ADMIN_URL))
    try:
        yield PostgresDatabase(app_url, _server_dsn(name), name, role)
    finally:
        blocking(_drop(name, role))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabase]:
    yield from new_postgres_database()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'tapgate.db'}"
    blocking(migrate(url))
    return url


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The same contract over every Store adapter."""
    if request.param == "memory":
        yield MemoryStore()
        return
    url = (
        request.getfixturevalue("sqlite_url")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres").app_url
    )
    sql = open_sql_store(url)
    try:
        yield sql
    finally:
        await sql.close()


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


def tenant_name() -> str:
    """A fresh tenant per test, so tests can share one PostgreSQL database."""
    return f"t-{secrets.token_hex(4)}"


@pytest.fixture
def settings(sqlite_url: str) -> Settings:
    return Settings(database_url=sqlite_url)


@pytest.fixture
def device_settings(sqlite_url: str) -> Settings:
    return Settings(database_url=sqlite_url, device_channel_enabled=True, device_sms_enabled=True)


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP API in process (ASGI), over a migrated SQLite, with the device flags off."""
    async with asgi_client(settings) as client:
        yield client


@pytest.fixture
async def device_api(device_settings: Settings, clock: FrozenClock) -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP API in process (ASGI), over a migrated SQLite, with the device channel on and a
    clock the test moves."""
    async with asgi_client(device_settings, clock) as client:
        yield client


@contextlib.asynccontextmanager
async def asgi_client(
    settings: Settings, clock: FrozenClock | None = None, push: PushSender | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    app = build_app(settings, clock=clock, push=push)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://tapgate.test") as client,
    ):
        client.app = app  # type: ignore[attr-defined]
        yield client


# -- push: loopback fakes of the push services (tests/pushfakes.py) ----------------------------------------


@pytest.fixture(scope="session")
def push_server() -> Iterator[PushFakes]:
    with LoopbackServer(PushFakes(new_accounts())) as fakes:
        yield fakes


@pytest.fixture
def fakes(push_server: PushFakes) -> Iterator[PushFakes]:
    """The push fakes, emptied; every check they made must have passed."""
    push_server.reset()
    yield push_server
    assert push_server.problems == []


@pytest.fixture
def push_clock() -> FrozenClock:
    """A frozen clock near the real time: the relay fake checks timestamps against its own clock."""
    return FrozenClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
async def push_http() -> AsyncIterator[httpx.AsyncClient]:
    """The push senders' client (each sender bounds its own time)."""
    async with httpx.AsyncClient(timeout=SENDER_TIMEOUT) as client:
        yield client
