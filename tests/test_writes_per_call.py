"""Writing transactions per call (DESIGN §16): the call and its answer commit; authenticating and the
agent's read of the answer do not. A device on the long-poll adds one: its fetch marks when the call was
handed over, which the long-poll's redelivery (DESIGN §18) reads; a device on a WebSocket does not (its link
remembers what it holds; the bench's round-trip rows count that path). Counted by the store's own
counters."""

from __future__ import annotations

import asyncio

import httpx

from tapgate.adapters.store.counting import COUNTS
from tests.world import LAMP, World, bearer, device_body

TOOL = "device__desk_lamp__set_light"


async def _round_trip(client: httpx.AsyncClient, agent: str, lamp: str) -> None:
    waiting = asyncio.create_task(
        client.post(
            "/v1/invocations",
            json={"tool": TOOL, "arguments": {"on": True}, "wait": 20},
            headers=bearer(agent),
        )
    )
    r = await client.get("/v1/device/invocations", params={"wait": 10}, headers=bearer(lamp))
    [call] = r.json()["invocations"]
    r = await client.post(
        f"/v1/device/invocations/{call['id']}/result", json={"status": "done"}, headers=bearer(lamp)
    )
    assert r.status_code == 200, r.text
    view = (await asyncio.wait_for(waiting, timeout=20)).json()
    assert view["status"] == "done"


async def test_a_call_to_a_long_polling_device_commits_its_call_its_hand_over_and_its_answer(
    device_api: httpx.AsyncClient,
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    await _round_trip(device_api, agent, lamp)  # the tokens and the device are in the cache now
    before = COUNTS.writing
    for _ in range(3):
        await _round_trip(device_api, agent, lamp)
    assert COUNTS.writing - before == 3 * 3


async def test_a_link_that_opens_writes_once_and_reads_its_pending_work_in_one_transaction(
    device_api: httpx.AsyncClient,
) -> None:
    """Opening a live link writes its presence and its hold together, and the first look at the
    device's calls, the person's approvals and the device's notices is one read."""
    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    r = await device_api.post(
        "/v1/invocations", json={"tool": TOOL, "arguments": {"on": True}, "wait": 0}, headers=bearer(agent)
    )
    assert r.json()["status"] == "pending", r.text
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    gateway._auth.clear()  # a device that connects cold: its token is read from the database
    before = COUNTS.writing
    caller = await gateway.authenticate_device(lamp, present=False)
    frames = gateway.device_link(caller, lamp)
    try:
        frame = await asyncio.wait_for(anext(frames), timeout=20)
        assert frame["type"] == "device:invoke"
        assert COUNTS.writing - before == 1
        async with gateway.store.unit_of_work(caller.principal.tenant_id) as uow:
            device = await uow.devices.by_uid(caller.device.device_uid)
        assert device is not None and device.last_seen_at is not None and device.link_until is not None
    finally:
        await frames.aclose()
