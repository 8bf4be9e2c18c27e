"""``device:notice`` (DESIGN §18) against real gateways: an agent's notice reaches every active device of
the person that holds a live WebSocket link, at once and in whichever process the link is, once per
device; a notice posted while the device is away (even across a restart) arrives when it links again;
nobody else's device hears it, and a revoked one never does. On SQLite (one gateway), and on PostgreSQL
with two gateways woken by LISTEN/NOTIFY or by NATS, polling far past the tests' bounds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tapgate.adapters.store.migrate import migrate
from tapgate.adapters.store.sql import open_sql_store
from tapgate.domain.devices import Device
from tapgate.domain.push import OutboxItem, OutboxStatus
from tapgate.ports import Store
from tests.conftest import PostgresDatabase, blocking
from tests.live import Server, new_tenant, write_config
from tests.natsserver import reachable_nats_url
from tests.world import LAMP, bearer, device_body

BOUND = 10.0  # seconds for what should take a moment: the machine is shared
QUIET = 1.5  # seconds a link is watched for a frame that must not come
WORDS = {"title": "Backup done", "body": "All three disks"}


@dataclass
class Gateways:
    """Where devices link (``first``) and where agents post (``second``): the same process on SQLite."""

    first: Server
    second: Server
    database_url: str


def _database(engine: str, folder: Path, request: pytest.FixtureRequest) -> str:
    if engine == "sqlite":
        url = f"sqlite:///{folder / 'tapgate.db'}"
        blocking(migrate(url))
        return url
    postgres: PostgresDatabase = request.getfixturevalue("postgres")
    return postgres.app_url


@pytest.fixture(
    scope="module",
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("nats", marks=pytest.mark.postgres),
    ],
)
def gateways(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    engine = request.param
    folder = tmp_path_factory.mktemp(f"notices-{engine}")
    url = _database(engine, folder, request)
    settings: dict[str, Any] = {"notice_text": True, "invocation_poll_seconds": 60}
    if engine == "nats":
        settings |= {"wake": "nats", "nats_url": reachable_nats_url()}
    elif engine == "postgres":
        settings["wake"] = "postgres"
    config = write_config(folder, url, **settings)
    servers = [Server(config).start()]
    try:
        if engine != "sqlite":
            servers.append(Server(config).start())
        yield Gateways(servers[0], servers[-1], url)
    finally:
        for server in servers:
            server.stop()


@dataclass
class Home:
    on_first: httpx.AsyncClient
    on_second: httpx.AsyncClient
    gateways: Gateways
    store: Store  # the gateways' database, read beside them
    tenant: str
    operator: str
    agent: str  # ana's
    devices: dict[str, str]  # device token by device id

    async def enrol(self, user: str, device_id: str, **extra: Any) -> str:
        body = device_body(device_id, [LAMP], grants=["set_light"], **extra)
        r = await self.on_first.post(f"/v1/users/{user}/devices", json=body, headers=bearer(self.operator))
        assert r.status_code == 201, r.text
        self.devices[device_id] = r.json()["device_token"]
        return self.devices[device_id]

    def link(self, device_id: str) -> Any:
        url = self.gateways.first.url.replace("http", "ws") + "/v1/device/connect"
        return websockets.connect(url, additional_headers=bearer(self.devices[device_id]), compression=None)

    async def notice(self, event: str = "goal.done", **body: Any) -> dict[str, Any]:
        """Post a notice on the second gateway (ana's agent, or the operator naming ``user_id``)."""
        token = self.operator if "user_id" in body else self.agent
        r = await self.on_second.post("/v1/notices", json={"event": event, **body}, headers=bearer(token))
        assert r.status_code == 202, r.text
        return dict(r.json())

    async def device(self, user: str, device_id: str) -> Device:
        async with self.store.unit_of_work(self.tenant) as uow:
            device = await uow.devices.get(user, device_id)
        assert device is not None
        return device

    async def until_linked(self, user: str, device_id: str) -> None:
        """Wait until the device's link is held (it counts as live when a notice is posted)."""
        deadline = time.monotonic() + BOUND
        while True:
            if (await self.device(user, device_id)).live(datetime.now(UTC)):
                return
            assert time.monotonic() < deadline, f"{device_id} did not link in time"
            await asyncio.sleep(0.05)

    async def until_marked(self, notice_id: str, user: str, device_id: str) -> None:
        """Wait until the device's row of the notice is marked as carried by its link."""
        deadline = time.monotonic() + BOUND
        while True:
            if [r.status for r in await self.rows(notice_id, user, device_id)] == [OutboxStatus.LINKED]:
                return
            assert time.monotonic() < deadline, f"the notice was not marked linked for {device_id} in time"
            await asyncio.sleep(0.05)

    async def rows(self, notice_id: str, user: str, device_id: str) -> list[OutboxItem]:
        """The notice's outbox rows for the device, read beside the gateways."""
        uid = (await self.device(user, device_id)).device_uid
        async with self.store.unit_of_work(self.tenant) as uow:
            return [row for row in await uow.outbox.for_subject(notice_id) if row.device_uid == uid]


@pytest.fixture
async def home(gateways: Gateways) -> AsyncIterator[Home]:
    tenant = f"t-{secrets.token_hex(4)}"
    operator = await new_tenant(gateways.database_url, tenant)
    store = open_sql_store(gateways.database_url)
    try:
        async with (
            httpx.AsyncClient(base_url=gateways.first.url, timeout=30) as on_first,
            httpx.AsyncClient(base_url=gateways.second.url, timeout=30) as on_second,
        ):
            as_operator = bearer(operator)
            for user in ("ana", "bob"):
                r = await on_first.post("/v1/users", json={"user_id": user}, headers=as_operator)
                assert r.status_code == 201, r.text
            r = await on_first.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)
            home = Home(on_first, on_second, gateways, store, tenant, operator, r.json()["token"], {})
            await home.enrol("ana", "desk-lamp")  # no push target: only its link hears a notice
            yield home
    finally:
        await store.close()


async def _notice_frame(link: Any, seconds: float = BOUND) -> dict[str, Any]:
    """The next ``device:notice`` frame (frames of other kinds are skipped)."""
    async with asyncio.timeout(seconds):
        while True:
            frame = json.loads(await link.recv())
            if frame["type"] == "device:notice":
                return dict(frame)


async def _no_notice(link: Any) -> None:
    with contextlib.suppress(TimeoutError):
        frame = await _notice_frame(link, QUIET)
        raise AssertionError(f"an unexpected notice: {frame}")


async def test_a_device_with_only_a_live_link_hears_a_notice_at_once_and_once(home: Home) -> None:
    async with home.link("desk-lamp") as link:
        await home.until_linked("ana", "desk-lamp")
        posted = await home.notice(data={"goal_id": "g-17", "urgent": True}, ui=WORDS)
        assert posted == {"delivered_to": ["desk-lamp"]}
        frame = await _notice_frame(link)
        notice = frame["notice"]
        assert set(frame) == {"type", "notice"}
        assert notice["id"].startswith("ntc_") and notice["createdAt"]
        assert {k: notice[k] for k in ("event", "title", "body", "data")} == {
            "event": "goal.done",
            **WORDS,
            "data": {"goal_id": "g-17", "urgent": True},
        }
        await home.notice("run.failed", data={"run_id": "r-2"})
        second = await _notice_frame(link)  # the next notice, not the first again
        assert second["notice"]["event"] == "run.failed" and second["notice"]["title"] is None
        assert second["notice"]["data"] == {"run_id": "r-2"}
        for sent in (frame, second):
            await home.until_marked(sent["notice"]["id"], "ana", "desk-lamp")
    async with home.link("desk-lamp") as link:
        await _no_notice(link)  # a new link does not send what an earlier one carried


async def test_a_notice_posted_while_the_device_is_away_arrives_when_it_links_again_even_after_a_restart(
    home: Home,
) -> None:
    posted = await home.notice("memory.proposed", data={"memory_id": "m-3"})
    assert posted == {"delivered_to": ["desk-lamp"]}
    home.gateways.first.kill()  # the gateway the device links to dies and comes back: the row stays
    home.gateways.first.start()
    async with home.link("desk-lamp") as link:
        frame = await _notice_frame(link)
        assert frame["notice"]["event"] == "memory.proposed"
        assert frame["notice"]["data"] == {"memory_id": "m-3"}
        await _no_notice(link)


async def test_another_persons_device_and_a_revoked_device_never_hear_it(home: Home) -> None:
    await home.enrol("bob", "bob-lamp")
    await home.enrol("ana", "ana-phone")
    async with home.link("bob-lamp") as bobs, home.link("ana-phone") as phone:
        await home.until_linked("bob", "bob-lamp")
        await home.until_linked("ana", "ana-phone")
        r = await home.on_second.delete("/v1/users/ana/devices/ana-phone", headers=bearer(home.operator))
        assert r.status_code in (200, 204), r.text
        kinds = []
        with contextlib.suppress(websockets.ConnectionClosed):
            async with asyncio.timeout(BOUND):
                while True:
                    kinds.append(json.loads(await phone.recv())["type"])
        assert kinds[-1:] == ["device:revoked"]

        posted = await home.notice(ui=WORDS)
        assert posted == {"delivered_to": ["desk-lamp"]}  # not the revoked phone
        async with home.link("desk-lamp") as lamp:
            assert (await _notice_frame(lamp))["notice"]["id"]
        await home.notice("goal.blocked", user_id="bob")
        bobs_first = await _notice_frame(bobs)  # had ana's reached bob, it would come first
        assert bobs_first["notice"]["event"] == "goal.blocked"
    assert "device:notice" not in kinds
    async with home.link("ana-phone") as phone:  # a revoked device cannot link again
        with pytest.raises(websockets.ConnectionClosed) as refused:
            await asyncio.wait_for(phone.recv(), BOUND)
    assert refused.value.rcvd is not None and refused.value.rcvd.code == 4401


async def test_a_device_with_a_push_target_and_a_live_link_hears_it_on_the_link_and_is_not_pushed(
    home: Home,
) -> None:
    await home.enrol("ana", "ana-tablet", push={"kind": "fcm", "token": "fcm-ana-tablet"})
    async with home.link("ana-tablet") as link:
        await home.until_linked("ana", "ana-tablet")
        posted = await home.notice("run.finished")
        assert sorted(posted["delivered_to"]) == ["ana-tablet", "desk-lamp"]
        frame = await _notice_frame(link)
        assert frame["notice"]["event"] == "run.finished"
        await home.until_marked(frame["notice"]["id"], "ana", "ana-tablet")
    [row] = await home.rows(frame["notice"]["id"], "ana", "ana-tablet")
    assert row.status is OutboxStatus.LINKED and row.pushed_at is None
