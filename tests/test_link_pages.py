"""A live link reads at most a page of a device's pending calls (``answering.MAX_FETCH``, oldest first).
A call beyond the page reaches the link when the page makes room: an expiry, or the device's answer on a
link, wakes the link, which reads again. Nothing else wakes an idle link, so without them the newest call
would stay unsent until it expired too."""

from __future__ import annotations

import asyncio

import httpx

from tapgate.adapters.clock import FrozenClock
from tapgate.domain.frames import DeviceResult
from tapgate.services import expiry
from tapgate.services.answering import MAX_FETCH
from tests.world import LAMP, World, bearer, device_body

TOOL = "device__desk_lamp__set_light"


async def _call(client: httpx.AsyncClient, agent: str, invocation_id: str) -> None:
    body = {"tool": TOOL, "arguments": {"on": True}, "wait": 0, "invocation_id": invocation_id}
    r = await client.post("/v1/invocations", json=body, headers=bearer(agent))
    assert r.json()["status"] == "pending", r.text


async def test_a_call_past_the_links_first_page_is_sent_once_older_ones_expire(
    device_api: httpx.AsyncClient, clock: FrozenClock
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    older = [f"old-{i}" for i in range(MAX_FETCH)]
    for invocation_id in older:
        await _call(device_api, agent, invocation_id)
    clock.advance(5)
    await _call(device_api, agent, "newest")
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    caller = await gateway.authenticate_device(lamp, present=False)
    frames = gateway.device_link(caller, lamp)
    try:
        first = [await asyncio.wait_for(anext(frames), timeout=20) for _ in older]
        assert sorted(f["callId"] for f in first) == sorted(older)  # the page: the oldest, not the newest
        # The older calls pass their deadline, the newest not yet; the sweep ends them.
        clock.advance(gateway.ctx.limits.invocation_timeout_seconds - 2)
        assert await expiry.sweep(gateway.ctx) == MAX_FETCH
        frame = await asyncio.wait_for(anext(frames), timeout=20)
        assert (frame["type"], frame["callId"]) == ("device:invoke", "newest")
    finally:
        await frames.aclose()


async def test_a_call_past_the_links_first_page_is_sent_once_the_device_answers_one_on_the_link(
    device_api: httpx.AsyncClient,
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    for i in range(MAX_FETCH + 1):
        await _call(device_api, agent, f"call-{i:03}")
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    caller = await gateway.authenticate_device(lamp, present=False)
    frames = gateway.device_link(caller, lamp)
    try:
        sent = {(await asyncio.wait_for(anext(frames), timeout=20))["callId"] for _ in range(MAX_FETCH)}
        [waiting] = {f"call-{i:03}" for i in range(MAX_FETCH + 1)} - sent
        ack = await gateway.link_result(caller, DeviceResult(call_id=min(sent), status="done", message=None))
        assert ack["type"] == "device:ack", ack
        frame = await asyncio.wait_for(anext(frames), timeout=20)
        assert (frame["type"], frame["callId"]) == ("device:invoke", waiting)
    finally:
        await frames.aclose()
