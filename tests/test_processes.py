"""Real processes: a gateway killed and started again loses nothing (G17); two gateways on one
PostgreSQL wake each other's waiters at once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from tapgate.adapters.store.migrate import migrate
from tests.conftest import PostgresDatabase, blocking
from tests.live import Server, new_tenant, write_config
from tests.world import LAMP, bearer, device_body


def _database(engine: str, folder: Path, request: pytest.FixtureRequest) -> str:
    if engine == "sqlite":
        url = f"sqlite:///{folder / 'tapgate.db'}"
        blocking(migrate(url))
        return url
    postgres: PostgresDatabase = request.getfixturevalue("postgres")
    return postgres.app_url


async def _setup(client: httpx.AsyncClient, operator: str) -> tuple[str, str]:
    """ana, her agent token and her lamp's device token."""
    as_operator = bearer(operator)
    await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)
    agent = (await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)).json()[
        "token"
    ]
    body = device_body("desk-lamp", [LAMP], grants=["set_light"])
    lamp = (await client.post("/v1/users/ana/devices", json=body, headers=as_operator)).json()["device_token"]
    return agent, lamp


async def _invoke(client: httpx.AsyncClient, agent: str, **body: object) -> dict[str, object]:
    call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}} | body
    r = await client.post("/v1/invocations", json=call, headers=bearer(agent))
    assert r.status_code == 200, r.text
    return dict(r.json())


POLL_SECONDS = 30  # the poll interval of the two-gateway tests: far beyond any of their bounds
ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_invocation_written_before_a_kill_is_still_answerable_after_restart(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Gate G17."""
    url = _database(engine, tmp_path, request)
    server = Server(write_config(tmp_path, url, invocation_timeout_seconds=60)).start()
    try:
        operator = await new_tenant(url)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            agent, lamp = await _setup(client, operator)
            call = await _invoke(client, agent)
            server.kill()
            server.start()
            [fetched] = (await client.get("/v1/device/invocations", headers=bearer(lamp))).json()[
                "invocations"
            ]
            assert fetched["id"] == call["id"]
            r = await client.post(
                f"/v1/device/invocations/{call['id']}/result", json={"status": "done"}, headers=bearer(lamp)
            )
            assert r.status_code == 200
            view = (await client.get(f"/v1/invocations/{call['id']}", headers=bearer(agent))).json()
            assert view["status"] == "done"
    finally:
        server.stop()


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_invocation_whose_deadline_passed_while_down_expires_after_restart(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Gate G17: the sweep at start-up resolves what came due while the gateway was down."""
    url = _database(engine, tmp_path, request)
    server = Server(write_config(tmp_path, url, invocation_timeout_seconds=1)).start()
    try:
        operator = await new_tenant(url)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            agent, _ = await _setup(client, operator)
            call = await _invoke(client, agent)
            server.kill()
            await asyncio.sleep(1.1)  # the deadline passes while no gateway runs
            server.start()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while True:  # no reader asks: the start-up sweep alone must expire it
                entries = (await client.get("/v1/audit?limit=1000", headers=bearer(operator))).json()[
                    "entries"
                ]
                ends = [
                    e for e in entries if e["subject"] == call["id"] and e["action"] == "invocation.expired"
                ]
                if ends:
                    break
                assert loop.time() < deadline, "the sweep never expired the invocation"
                await asyncio.sleep(0.1)
            assert ends[0]["actor"] == "system:expiry"
            view = (await client.get(f"/v1/invocations/{call['id']}", headers=bearer(agent))).json()
            assert view["status"] == "expired"
    finally:
        server.stop()


@pytest.fixture
def two_gateways(postgres: PostgresDatabase, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    # A poll interval far longer than the test's bounds: only notifications can make it pass.
    config = write_config(tmp_path, postgres.app_url, invocation_poll_seconds=POLL_SECONDS)
    a, b = Server(config).start(), Server(config)
    try:
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.mark.postgres
async def test_two_gateways_on_one_postgresql_wake_each_others_waiters_at_once(
    two_gateways: tuple[Server, Server], postgres: PostgresDatabase
) -> None:
    a, b = two_gateways
    operator = await new_tenant(postgres.app_url)
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.url, timeout=30) as on_b,
    ):
        agent, lamp = await _setup(on_a, operator)
        loop = asyncio.get_running_loop()

        # A device long-polling on A gets a call made on B.
        polling = asyncio.create_task(on_a.get("/v1/device/invocations?wait=20", headers=bearer(lamp)))
        await asyncio.sleep(0.3)
        started = loop.time()
        call = await _invoke(on_b, agent)
        fetched = (await asyncio.wait_for(polling, timeout=30)).json()["invocations"]
        assert [f["id"] for f in fetched] == [call["id"]]
        assert loop.time() - started < POLL_SECONDS / 2  # by notification: the poll is far off

        # The agent waiting on B gets the answer posted on A.
        waiting = asyncio.create_task(
            on_b.get(f"/v1/invocations/{call['id']}?wait=20", headers=bearer(agent))
        )
        await asyncio.sleep(0.3)
        started = loop.time()
        await on_a.post(
            f"/v1/device/invocations/{call['id']}/result", json={"status": "done"}, headers=bearer(lamp)
        )
        view = (await asyncio.wait_for(waiting, timeout=30)).json()
        assert view["status"] == "done"
        assert loop.time() - started < POLL_SECONDS / 2  # by notification: the poll is far off

        # A device on A's WebSocket gets a call made on B.
        async with websockets.connect(
            a.url.replace("http", "ws") + "/v1/device/connect",
            additional_headers=bearer(lamp),
            compression=None,
        ) as link:
            await asyncio.sleep(0.3)
            call = await _invoke(on_b, agent)
            frame = json.loads(await asyncio.wait_for(link.recv(), timeout=30))
            assert frame["callId"] == call["id"]


@pytest.mark.postgres
async def test_a_gateway_whose_listener_drops_still_wakes_its_waiters(
    postgres: PostgresDatabase, tmp_path: Path
) -> None:
    import asyncpg

    from tests.conftest import ADMIN_URL

    config = write_config(tmp_path, postgres.app_url, invocation_poll_seconds=0.5)
    a, b = Server(config).start(), Server(config)
    try:
        b.start()
        operator = await new_tenant(postgres.app_url)
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.url, timeout=30) as on_b,
        ):
            agent, lamp = await _setup(on_a, operator)
            admin = await asyncpg.connect(ADMIN_URL.rsplit("/", 1)[0] + "/" + postgres.name)
            try:
                killed = await admin.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = $1 AND query LIKE 'LISTEN%'",
                    postgres.name,
                )
            finally:
                await admin.close()
            assert killed  # every gateway's listening connection was cut
            polling = asyncio.create_task(on_b.get("/v1/device/invocations?wait=20", headers=bearer(lamp)))
            call = await _invoke(on_a, agent)
            fetched = (await asyncio.wait_for(polling, timeout=30)).json()["invocations"]
            assert [f["id"] for f in fetched] == [call["id"]]
    finally:
        a.stop()
        b.stop()


@pytest.mark.postgres
async def test_a_device_revoked_on_one_gateway_is_refused_on_another_within_a_second(
    two_gateways: tuple[Server, Server], postgres: PostgresDatabase
) -> None:
    """Gate G7 across processes: no gateway keeps trusting a token its peer revoked. The revocation
    reaches the other process's token cache by a database notification (DESIGN §15: within a second);
    the bound here is wider only because a shared CI machine may hold the notification up."""
    a, b = two_gateways
    operator = await new_tenant(postgres.app_url)
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.url, timeout=30) as on_b,
    ):
        _, lamp = await _setup(on_a, operator)
        for _ in range(3):  # B has seen and remembered the device
            assert (await on_b.get("/v1/device/invocations", headers=bearer(lamp))).status_code == 200
        r = await on_a.delete("/v1/users/ana/devices/desk-lamp", headers=bearer(operator))
        assert r.status_code == 204
        refused_at = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while refused_at is None and loop.time() < deadline:
            status = (await on_b.get("/v1/device/invocations", headers=bearer(lamp))).status_code
            assert status in (200, 401), status
            if status == 401:
                refused_at = loop.time()
        assert refused_at is not None, "gateway B still trusted the revoked device after 10 s"
        assert (await on_b.get("/v1/device/invocations", headers=bearer(lamp))).status_code == 401
