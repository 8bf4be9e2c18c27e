"""A device link lasts hours, so what it keeps is kept for hours (docs/performance.md, idle links). Once a
link is open and authenticated, nothing of its upgrade request stays: not the headers uvicorn's protocol
and the websockets library's parser read (api/fast/light_ws.py), not the copy the app was handed in its scope
(api/routes/link.py). Served by a real uvicorn in this process, with ``tapgate serve``'s options, so the
test can look at every object the process holds; the device is another process, whose own copy of its
request is not this one's to find."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import secrets
import sys
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
import uvicorn

from tapgate.bootstrap import build_app
from tapgate.cli import UVICORN_OPTIONS
from tapgate.config import Settings
from tapgate.domain.devices import Device
from tests.live import free_port
from tests.world import LAMP, World, bearer, device_body

DEVICE = """
import asyncio, json, sys
from websockets.asyncio.client import connect

async def main():
    url, headers, first = json.loads(sys.argv[1])
    async with connect(url, additional_headers=headers) as link:
        if first:
            await link.send(first)
        print("open", flush=True)
        print(await link.recv(), flush=True)

asyncio.run(main())
"""


@contextlib.asynccontextmanager
async def _serving(settings: Settings) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    app = build_app(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **UVICORN_OPTIONS))
    serving = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(60):
            await _until(lambda: server.started or serving.done())
        assert server.started, "the server stopped before it started"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            client.app = app  # type: ignore[attr-defined]
            yield f"ws://127.0.0.1:{port}", client
    finally:
        server.should_exit = True
        await serving


async def _until(condition: Callable[[], bool]) -> None:
    """Until ``condition`` holds (the caller bounds the wait)."""
    while True:
        if condition():
            return
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def _linked(
    ws_url: str, client: httpx.AsyncClient, headers: dict[str, str], first: str | None = None
) -> AsyncIterator[asyncio.StreamReader]:
    """A device in another process, linked (the gateway holds its link); what it prints. Killed after."""
    device = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        DEVICE,
        json.dumps([f"{ws_url}/v1/device/connect", headers, first]),
        stdout=asyncio.subprocess.PIPE,
    )
    assert device.stdout is not None
    try:
        async with asyncio.timeout(60):
            assert await device.stdout.readline() == b"open\n"
            links = client.app.state.gateway.links  # type: ignore[attr-defined]
            await _until(lambda: len(links) == 1)
        yield device.stdout
    finally:
        with contextlib.suppress(ProcessLookupError):
            device.kill()
        await device.wait()


def _holders(marker: str) -> list[object]:
    """Every list or tuple the process holds with ``marker`` (as text or bytes) in it, or in a tuple in it
    (the collector stops tracking a tuple of strings, such as a header's name and value)."""
    gc.collect()
    wanted = (marker, marker.encode())

    def has(items: list[object] | tuple[object, ...]) -> bool:
        return any(
            x in wanted if isinstance(x, str | bytes) else isinstance(x, tuple) and has(x) for x in items
        )

    return [o for o in gc.get_objects() if isinstance(o, tuple | list) and o is not wanted and has(o)]


@pytest.mark.parametrize("auth", ["header", "frame"])
async def test_an_open_link_keeps_nothing_of_its_upgrade_request(
    device_settings: Settings, auth: str
) -> None:
    async with _serving(device_settings) as (ws_url, client):
        world = await World(client).start()
        await world.person("ana")
        token = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
        marker = f"probe-{secrets.token_hex(8)}"
        headers = {"X-Probe": marker}
        if auth == "header":
            headers["Authorization"] = f"Bearer {token}"
        first = (
            json.dumps({"type": "device:auth", "deviceId": "desk-lamp", "token": token})
            if auth == "frame"
            else None
        )
        async with _linked(ws_url, client, headers, first) as device:
            assert _holders(marker) == []
            # The link still works: a call reaches it.
            agent = await world.agent("ana")
            body = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}, "wait": 0}
            r = await client.post("/v1/invocations", json=body, headers=bearer(agent))
            assert r.status_code in (200, 201, 202), r.text
            frame = await asyncio.wait_for(device.readline(), timeout=60)
            assert json.loads(frame)["type"] == "device:invoke"


async def test_an_idle_link_holds_its_device_once_after_reading_what_it_may_answer(
    device_settings: Settings,
) -> None:
    """Each time a link reads the approvals its device may answer it reads the device as stored then;
    that copy goes once the approvals are sent. From then on the link holds its device once (its
    caller's), not a second copy for the hours an idle link lasts."""
    async with _serving(device_settings) as (ws_url, client):
        world = await World(client).start()
        await world.person("ana")
        asking_lamp = LAMP | {"confirm": True}  # the lamp signs the calls to itself
        token = await world.enrol("ana", device_body("desk-lamp", [asking_lamp], grants=["set_light"]))
        async with _linked(ws_url, client, {"Authorization": f"Bearer {token}"}) as device:
            agent = await world.agent("ana")
            body = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}, "wait": 0}
            r = await client.post("/v1/invocations", json=body, headers=bearer(agent))
            assert r.json()["status"] == "awaiting_approval", r.text
            # The link read the device and the approvals, and sent the card.
            frame = await asyncio.wait_for(device.readline(), timeout=60)
            assert json.loads(frame)["type"] == "device:approval"
            # Ana's one device, held by the link's caller; the copy it read the approvals by is gone.
            assert len(_devices()) == 1


def _devices() -> list[Device]:
    """The ``Device`` objects the process holds."""
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, Device)]
