"""Pushes across real processes: `tapgate serve` killed between a push's commit and its send sends it after
restart, exactly once (G17); two gateways on one PostgreSQL send each row once, woken by each other."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest

from tapgate.adapters.store.migrate import migrate
from tapgate.adapters.store.sql import open_sql_store
from tapgate.domain.push import OutboxItem, OutboxStatus
from tests.conftest import PostgresDatabase, blocking
from tests.live import Server, new_tenant, write_config
from tests.pushfakes import PushFakes
from tests.pushworld import arrived
from tests.world import LAMP, bearer, device_body

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _database(engine: str, folder: Path, request: pytest.FixtureRequest) -> str:
    if engine == "sqlite":
        url = f"sqlite:///{folder / 'tapgate.db'}"
        blocking(migrate(url))
        return url
    postgres: PostgresDatabase = request.getfixturevalue("postgres")
    return postgres.app_url


def _push_config(folder: Path, url: str, fakes: PushFakes, **settings: object) -> Path:
    return write_config(
        folder,
        url,
        relay_secret=fakes.accounts.relay_secret,
        push_relays={"fcm": f"{fakes.base_url}/relay/ok"},
        **settings,
    )


async def _person(client: httpx.AsyncClient, operator: str, devices: int = 1) -> tuple[str, list[str]]:
    """ana with an agent token and phones whose pushes go to the relay; the tokens."""
    as_operator = bearer(operator)
    assert (await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)).status_code == 201
    r = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)
    agent = r.json()["token"]
    phones = []
    for n in range(devices):
        body = device_body(
            f"phone-{n}", [LAMP], grants=["set_light"], push={"kind": "fcm", "token": f"t-{n}"}
        )
        r = await client.post("/v1/users/ana/devices", json=body, headers=as_operator)
        assert r.status_code == 201, r.text
        phones.append(r.json()["device_token"])
    return agent, phones


async def _hold_link(url: str, device_id: str) -> None:
    """Mark ana's device live for a minute, as a WebSocket link held by another gateway process does."""
    store = open_sql_store(url)
    try:
        for tenant in await store.tenant_ids():
            async with store.unit_of_work(tenant) as uow:
                device = await uow.devices.get("ana", device_id)
                if device is not None:
                    await uow.devices.set_link(device.device_uid, datetime.now(UTC) + timedelta(seconds=60))
    finally:
        await store.close()


async def _rows(url: str, subject_id: str) -> list[OutboxItem]:
    store = open_sql_store(url)
    try:
        found = []
        for tenant in await store.tenant_ids():
            async with store.unit_of_work(tenant) as uow:
                found += await uow.outbox.for_subject(subject_id)
        return found
    finally:
        await store.close()


async def _settled(url: str, subject_id: str, seconds: float = 10) -> OutboxItem:
    """The row once the gateway recorded its outcome (the relay sees the push a moment before)."""
    with anyio.fail_after(seconds):
        while True:
            [row] = await _rows(url, subject_id)
            if row.status is not OutboxStatus.QUEUED:
                return row
            await anyio.sleep(0.05)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_push_committed_before_a_kill_is_sent_after_restart_exactly_once(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest, fakes: PushFakes
) -> None:
    """Gate G17 for the outbox. The phone holds a live link (on another worker, say), so its push waits
    out live_ack_seconds first; the gateway is killed within them."""
    url = _database(engine, tmp_path, request)
    # The call must outlive a kill and a restart on a busy machine: its device's live-link timeout is
    # far above the test's bounds (a call that expired meanwhile is no longer listed).
    config = _push_config(tmp_path, url, fakes, live_ack_seconds=3, device_call_timeout_seconds=120)
    server = Server(config).start()
    try:
        operator = await new_tenant(url)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            agent, [phone] = await _person(client, operator)
            await _hold_link(url, "phone-0")
            call = {"tool": "device__phone_0__set_light", "arguments": {"on": True}}
            r = await client.post("/v1/invocations", json=call, headers=bearer(agent))
            assert r.status_code == 200, r.text
            invocation_id = r.json()["id"]
            server.kill()  # after the commit, before the push's moment
            assert fakes.seen == []
            [row] = await _rows(url, invocation_id)
            assert (row.status, row.attempts) == (OutboxStatus.QUEUED, 0)
            server.start()
            await arrived(fakes, "relay", seconds=10)

            [seen] = fakes.route_seen("relay")
            assert json.loads(seen.body)["data"] == {"invocation_id": invocation_id}
            row = await _settled(url, invocation_id)
            assert (row.status, row.attempts) == (OutboxStatus.SENT, 1)  # sent: it will never go again
            assert fakes.hits["replayed"] == 0
            fetched = (await client.get("/v1/device/invocations", headers=bearer(phone))).json()
            assert [i["id"] for i in fetched["invocations"]] == [invocation_id]
    finally:
        server.stop()


@pytest.fixture
def two_gateways(
    postgres: PostgresDatabase, tmp_path: Path, fakes: PushFakes
) -> Iterator[tuple[Server, Server]]:
    # Sweeps far longer than the test's bounds: only notifications wake the workers in time. No pause
    # per device and no cap: each notice event is a push of its own to each device.
    config = _push_config(
        tmp_path, postgres.app_url, fakes, push_sweep_seconds=60, push_coalesce_seconds=0, push_cap=1000
    )
    a, b = Server(config).start(), Server(config)
    try:
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


EVENTS = ("goal.blocked", "goal.done", "memory.proposed", "suggestion.proposed", "run.finished", "run.failed")


@pytest.mark.postgres
async def test_two_gateways_on_one_postgresql_send_each_push_once_as_soon_as_it_commits(
    two_gateways: tuple[Server, Server], postgres: PostgresDatabase, fakes: PushFakes
) -> None:
    a, b = two_gateways
    operator = await new_tenant(postgres.app_url)
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=10) as on_a,
        httpx.AsyncClient(base_url=b.url, timeout=10) as on_b,
    ):
        agent, phones = await _person(on_a, operator, devices=3)
        for n, event in enumerate(EVENTS):  # notices posted to both gateways in turn
            r = await (on_a if n % 2 else on_b).post(
                "/v1/notices", json={"event": event, "data": {"run": n}}, headers=bearer(agent)
            )
            assert r.status_code == 202, r.text
        await arrived(fakes, "relay", count=len(EVENTS) * len(phones), seconds=15)

    delivered = [json.loads(seen.body)["delivery_id"] for seen in fakes.route_seen("relay")]
    assert len(delivered) == len(set(delivered)) == len(EVENTS) * len(phones)
    assert fakes.hits["replayed"] == 0
