"""Three `tapgate serve` processes on one PostgreSQL, waking each other over NATS or LISTEN/NOTIFY
(DESIGN §17): a device linked to the first, its agent on the second, the person deciding on the third.
Killing the device's gateway mid-call loses nothing: the device reconnects to another and answers, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.conftest import PostgresDatabase
from tests.live import Server, new_tenant, write_config
from tests.natsserver import reachable_nats_url
from tests.world import LAMP, bearer, device_body

BOUND = 15.0  # seconds: generous, the machine is shared
DOOR = LAMP | {"name": "unlock_door", "description": "Unlock the front door.", "confirm": True}


@pytest.fixture(params=["nats", "postgres"])
def gateways(
    request: pytest.FixtureRequest, postgres: PostgresDatabase, tmp_path: Path
) -> Iterator[list[Server]]:
    settings: dict[str, Any] = {"wake": request.param}
    if request.param == "nats":
        settings["nats_url"] = reachable_nats_url()
    # A poll interval far past the test's bounds: only wakes between the processes can make it pass in time.
    config = write_config(
        tmp_path, postgres.app_url, invocation_poll_seconds=60, invocation_timeout_seconds=120, **settings
    )
    servers = [Server(config) for _ in range(3)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


class Device:
    """A device given several gateway URLs: when its link drops, it links to the next one that answers."""

    def __init__(self, urls: list[str], token: str) -> None:
        self.urls = urls
        self.token = token
        self.at = 0
        self.link: ClientConnection | None = None

    async def connect(self) -> str:
        for step in range(len(self.urls)):
            url = self.urls[(self.at + step) % len(self.urls)]
            with contextlib.suppress(OSError, websockets.InvalidStatus, websockets.InvalidHandshake):
                self.link = await websockets.connect(
                    url.replace("http", "ws") + "/v1/device/connect",
                    additional_headers=bearer(self.token),
                    compression=None,
                    open_timeout=5,
                )
                self.at = (self.at + step) % len(self.urls)
                return url
        raise AssertionError("no gateway took the device's link")

    async def next_call(self) -> dict[str, Any]:
        assert self.link is not None
        while True:  # the person's approvals and the acks of earlier answers share the link
            frame = json.loads(await asyncio.wait_for(self.link.recv(), timeout=BOUND))
            if frame["type"] not in ("device:approval", "device:ack"):
                break
        assert frame["type"] == "device:invoke", frame
        return dict(frame)

    async def wait_closed(self) -> None:
        assert self.link is not None
        with contextlib.suppress(websockets.ConnectionClosed):
            await asyncio.wait_for(self.link.recv(), timeout=BOUND)
        self.at += 1

    async def answer(self, call_id: str) -> None:
        assert self.link is not None
        await self.link.send(json.dumps({"type": "device:result", "callId": call_id, "status": "done"}))

    async def close(self) -> None:
        if self.link is not None:
            await self.link.close()


@contextlib.asynccontextmanager
async def clients(servers: list[Server]) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(httpx.AsyncClient(base_url=s.url, timeout=30)) for s in servers
        ]


@pytest.mark.postgres
async def test_a_call_crosses_three_gateways_and_survives_the_kill_of_the_devices_gateway(
    gateways: list[Server], postgres: PostgresDatabase
) -> None:
    first, _, third = gateways
    operator = await new_tenant(postgres.app_url)
    async with clients(gateways) as (on_first, on_second, on_third):
        as_operator = bearer(operator)
        await on_first.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)
        tokens = {}
        for kind in ("agent", "user"):
            r = await on_first.post("/v1/users/ana/tokens", json={"kind": kind}, headers=as_operator)
            tokens[kind] = r.json()["token"]
        body = device_body("front-door", [DOOR], grants=["unlock_door"])
        door = (await on_first.post("/v1/users/ana/devices", json=body, headers=as_operator)).json()[
            "device_token"
        ]

        # The device links to the first gateway; it knows the third as its next.
        device = Device([first.url, third.url], door)
        assert await device.connect() == first.url
        try:
            # The agent asks on the second: the call waits for the person.
            r = await on_second.post(
                "/v1/invocations",
                json={"tool": "device__front_door__unlock_door", "arguments": {"on": True}},
                headers=bearer(tokens["agent"]),
            )
            call = r.json()
            assert call["status"] == "awaiting_approval", r.text
            waiting = asyncio.create_task(
                on_second.get(f"/v1/invocations/{call['id']}?wait=60", headers=bearer(tokens["agent"]))
            )

            # The person decides on the third; the device's link on the first gets the call at once.
            as_person = bearer(tokens["user"])
            [approval] = (await on_third.get("/v1/inbox", headers=as_person)).json()["approvals"]
            decision = {"decision": "approved"}
            r = await on_third.post(f"/v1/approvals/{approval['id']}", json=decision, headers=as_person)
            assert r.status_code == 200, r.text
            assert (await device.next_call())["callId"] == call["id"]

            # Mid-call, the device's gateway dies. The device links to the next one and gets the same call.
            first.kill()
            await device.wait_closed()
            assert await device.connect() == third.url
            again = await device.next_call()
            assert again["callId"] == call["id"]
            await device.answer(call["id"])

            # The agent, still waiting on the second, hears the answer given on the third.
            view = (await asyncio.wait_for(waiting, timeout=BOUND)).json()
            assert view["status"] == "done", view

            # A second answer (a device retrying after a drop) is refused: the first stands.
            await device.answer(call["id"])
            assert device.link is not None
            refused = json.loads(await asyncio.wait_for(device.link.recv(), timeout=BOUND))
            while refused["type"] != "device:ack" or refused.get("status") == "accepted":
                # the first answer's ack, and approvals, may come first
                refused = json.loads(await asyncio.wait_for(device.link.recv(), timeout=BOUND))
            assert (refused["status"], refused.get("first")) == ("duplicate", "done"), refused
        finally:
            await device.close()

        # Nothing lost, nothing answered twice.
        entries = (await on_second.get("/v1/audit?limit=1000", headers=as_operator)).json()["entries"]
        actions = [e["action"] for e in entries if e["subject"] == call["id"]]
        assert actions.count("invocation.answered") == 1, actions
        assert "invocation.expired" not in actions
        assert (await on_third.get("/v1/device/invocations", headers=bearer(door))).json()[
            "invocations"
        ] == []
