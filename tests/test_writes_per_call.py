"""Writing transactions per call (DESIGN §16): the call and its answer commit; authenticating, fetching
and the agent's read of the answer do not. When the long-poll handed a call over (its redelivery, DESIGN
§18, reads it) is written for many calls at once in a later batch (``services/handed.py``), counted apart;
a device with a push target has it written by the fetch itself, since the mark withholds its push.
Counted by the store's own counters."""

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


async def test_a_call_to_a_long_polling_device_commits_its_call_and_its_answer(
    device_api: httpx.AsyncClient,
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    hands = device_api.app.state.gateway.hands  # type: ignore[attr-defined]
    hands.flush_seconds = 3600  # no batch of its own meanwhile: the ones below write the marks
    await _round_trip(device_api, agent, lamp)  # the tokens and the device are in the cache now
    await hands.flush()
    before, batches = COUNTS.writing, hands.batches
    for _ in range(3):
        await _round_trip(device_api, agent, lamp)
    assert COUNTS.writing - before == 2 * 3
    await hands.flush()  # the three hand-over marks, together
    assert (COUNTS.writing - before, hands.batches - batches) == (2 * 3 + 1, 1)


async def _handed_mark(client: httpx.AsyncClient, push: dict[str, str] | None) -> tuple[bool, bool]:
    """Whether the call's hand-over mark is written once the fetch has answered, and after a batch."""
    world = await World(client).start()
    await world.person("ana")
    agent = await world.agent("ana")
    extra = {"push": push} if push else {}
    lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"], **extra))
    gateway = client.app.state.gateway  # type: ignore[attr-defined]
    gateway.hands.flush_seconds = 3600  # no batch of its own before the look below
    r = await client.post(
        "/v1/invocations", json={"tool": TOOL, "arguments": {"on": True}, "wait": 0}, headers=bearer(agent)
    )
    invocation_id = r.json()["id"]
    r = await client.get("/v1/device/invocations", headers=bearer(lamp))
    assert [c["id"] for c in r.json()["invocations"]] == [invocation_id]
    [tenant] = await gateway.store.tenant_ids()

    async def marked() -> bool:
        async with gateway.store.unit_of_work(tenant) as uow:
            invocation = await uow.invocations.get("ana", invocation_id)
        assert invocation is not None
        return invocation.delivered_at is not None

    at_once = await marked()
    await gateway.hands.flush()
    return at_once, await marked()


async def test_a_fetch_leaves_the_hand_over_mark_to_a_batch(device_api: httpx.AsyncClient) -> None:
    assert await _handed_mark(device_api, None) == (False, True)


async def test_a_fetch_by_a_device_with_a_push_target_writes_its_mark_itself(
    device_api: httpx.AsyncClient,
) -> None:
    """The mark withholds the push of a call the device has already: it cannot wait for a batch."""
    assert await _handed_mark(device_api, {"kind": "fcm", "token": "lamp"}) == (True, True)


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
