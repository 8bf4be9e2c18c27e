"""An answer reaches a call waiting in the same process without a read (services/handover.py), and a new
call reaches a live link of its process the same way (services/linking.py): the answer's own transaction
is the last one, the view is what a read would give, only the call's owner is handed anything, a link
woken by anything else reads, and nothing is left held once the calls end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx

from tapgate.adapters.store.counting import COUNTS
from tapgate.adapters.wake.local import LocalWake
from tapgate.domain.frames import DeviceResult
from tapgate.domain.invocations import Status
from tapgate.services.context import device_key, invocation_key
from tests.world import LAMP, World, bearer, device_body

TOOL = "device__desk_lamp__set_light"


async def _lamp_and_agent(client: httpx.AsyncClient) -> tuple[World, str, str]:
    world = await World(client).start()
    await world.person("ana")
    agent = await world.agent("ana")
    lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    return world, agent, lamp


def _waiting_call(client: httpx.AsyncClient, agent: str) -> asyncio.Task[httpx.Response]:
    """The agent's call, waiting up to 20 s for its answer, under way."""
    return asyncio.create_task(
        client.post(
            "/v1/invocations",
            json={"tool": TOOL, "arguments": {"on": True}, "wait": 20},
            headers=bearer(agent),
        )
    )


async def _fetch_one(client: httpx.AsyncClient, lamp: str) -> str:
    r = await client.get("/v1/device/invocations", params={"wait": 10}, headers=bearer(lamp))
    [call] = r.json()["invocations"]
    return str(call["id"])


async def _answer(client: httpx.AsyncClient, lamp: str, invocation_id: str) -> None:
    r = await client.post(
        f"/v1/device/invocations/{invocation_id}/result",
        json={"status": "done", "message": "on"},
        headers=bearer(lamp),
    )
    assert r.status_code == 200, r.text


async def test_a_waiting_call_is_answered_by_the_answers_own_transaction(
    device_api: httpx.AsyncClient,
) -> None:
    _, agent, lamp = await _lamp_and_agent(device_api)
    for turn in range(3):  # the first fills the caches (the tokens, the device)
        waiting = _waiting_call(device_api, agent)
        invocation_id = await _fetch_one(device_api, lamp)
        before = COUNTS.transactions
        await _answer(device_api, lamp, invocation_id)
        view = (await asyncio.wait_for(waiting, timeout=20)).json()
        assert view["status"] == "done" and view["id"] == invocation_id
        if turn:
            assert COUNTS.transactions - before == 1  # the answer; the waiting call read nothing back


async def test_the_handed_view_is_the_view_a_read_gives(device_api: httpx.AsyncClient) -> None:
    _, agent, lamp = await _lamp_and_agent(device_api)
    # The agent's call, and a second request of the same agent waiting on the same call by its id.
    waiting = _waiting_call(device_api, agent)
    invocation_id = await _fetch_one(device_api, lamp)
    reading = asyncio.create_task(
        device_api.get(f"/v1/invocations/{invocation_id}", params={"wait": 20}, headers=bearer(agent))
    )
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    [tenant] = await gateway.store.tenant_ids()
    key = invocation_key(tenant, "ana", invocation_id)
    deadline = asyncio.get_running_loop().time() + 20
    while gateway.ctx.handover.waiting_on(key) < 2:  # until both wait
        assert asyncio.get_running_loop().time() < deadline, "the two requests did not both wait"
        await asyncio.sleep(0)
    await _answer(device_api, lamp, invocation_id)
    handed = [(await asyncio.wait_for(task, timeout=20)).json() for task in (waiting, reading)]
    read = (await device_api.get(f"/v1/invocations/{invocation_id}", headers=bearer(agent))).json()
    assert handed == [read, read]
    assert read["status"] == "done" and read["result"] is not None and read["device_online"] is False
    assert not gateway.ctx.handover.wanted(key)  # nothing is held once the calls have ended


async def test_another_agent_waiting_on_the_call_is_handed_nothing(device_api: httpx.AsyncClient) -> None:
    world, agent, lamp = await _lamp_and_agent(device_api)
    other = await world.agent("ana", "planner")
    waiting = _waiting_call(device_api, agent)
    invocation_id = await _fetch_one(device_api, lamp)
    r = await device_api.get(f"/v1/invocations/{invocation_id}", params={"wait": 20}, headers=bearer(other))
    assert r.status_code == 404, r.text  # told at once, before any wait, as before
    await _answer(device_api, lamp, invocation_id)
    assert (await asyncio.wait_for(waiting, timeout=20)).json()["status"] == "done"


async def test_an_answer_already_handed_over_is_not_shown_to_another_agent(
    device_api: httpx.AsyncClient,
) -> None:
    """Even with the answer lying in the slot when its wait begins, another agent's read is refused."""
    world, agent, lamp = await _lamp_and_agent(device_api)
    other = await world.agent("ana", "planner")
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    [tenant] = await gateway.store.tenant_ids()
    waiting = _waiting_call(device_api, agent)
    invocation_id = await _fetch_one(device_api, lamp)
    key = invocation_key(tenant, "ana", invocation_id)
    with gateway.ctx.handover.waiting(key) as slot:
        await _answer(device_api, lamp, invocation_id)
        assert slot.ended is not None and slot.ended[0].status.value == "done"
        r = await device_api.get(
            f"/v1/invocations/{invocation_id}", params={"wait": 20}, headers=bearer(other)
        )
        assert r.status_code == 404, r.text
        r = await device_api.get(
            f"/v1/invocations/{invocation_id}", params={"wait": 20}, headers=bearer(agent)
        )
        assert r.json()["status"] == "done"
    assert (await asyncio.wait_for(waiting, timeout=20)).json()["status"] == "done"


async def test_an_answer_over_a_live_link_says_the_device_is_online_without_reading_it(
    device_api: httpx.AsyncClient,
) -> None:
    """A device answering on its live link is online: the answer's transaction, the call's last, reads
    no presence, and the handed view says ``device_online`` as a read would."""
    _, agent, lamp = await _lamp_and_agent(device_api)
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    caller = await gateway.authenticate_device(lamp, present=False)
    [tenant] = await gateway.store.tenant_ids()
    frames = gateway.device_link(caller, lamp)
    try:
        for turn in range(3):  # the first fills the caches
            waiting = _waiting_call(device_api, agent)
            frame = await asyncio.wait_for(anext(frames), timeout=20)
            assert frame["type"] == "device:invoke"
            before = COUNTS.statements
            ack = await gateway.link_result(caller, DeviceResult(frame["callId"], "done", "on"))
            spent = COUNTS.statements - before
            assert ack["status"] == "accepted", ack
            # the waiting call took its answer before the device's receipt went back
            assert not gateway.ctx.handover.wanted(invocation_key(tenant, "ana", frame["callId"]))
            view = (await asyncio.wait_for(waiting, timeout=20)).json()
            read = (await device_api.get(f"/v1/invocations/{frame['callId']}", headers=bearer(agent))).json()
            assert view == read and view["device_online"] is True
            if turn:
                # the answer (one statement), the chain's head, the entry, the event, the head's move
                assert spent == 5, spent
    finally:
        await frames.aclose()


async def test_an_answer_by_request_reads_its_devices_presence_in_its_own_statement(
    device_api: httpx.AsyncClient,
) -> None:
    """A device answering by request (a long-poll device) may be offline: the answer's statement returns
    its device's presence with the call, so the transaction is no longer than a linked answer's, and the
    handed view says ``device_online`` as a read would."""
    _, agent, lamp = await _lamp_and_agent(device_api)
    for turn in range(3):  # the first fills the caches (the tokens, the device)
        waiting = _waiting_call(device_api, agent)
        invocation_id = await _fetch_one(device_api, lamp)
        before = COUNTS.statements
        await _answer(device_api, lamp, invocation_id)
        spent = COUNTS.statements - before
        view = (await asyncio.wait_for(waiting, timeout=20)).json()
        read = (await device_api.get(f"/v1/invocations/{invocation_id}", headers=bearer(agent))).json()
        assert view == read and view["device_online"] is False
        if turn:
            # the answer with its device's presence, the chain's head, the entry, the event, the head's move
            assert spent == 5, spent


async def test_a_live_link_sends_a_call_written_in_its_process_without_reading_it(
    device_api: httpx.AsyncClient,
) -> None:
    """A WebSocket call commits twice and reads nothing else: the call (handed to the link with its
    wake) and the answer (handed to the waiting call). A wake from anywhere else still reads."""
    _, agent, lamp = await _lamp_and_agent(device_api)
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    caller = await gateway.authenticate_device(lamp, present=False)
    frames = gateway.device_link(caller, lamp)
    try:
        for turn in range(3):  # the first fills the caches and opens the link
            before = COUNTS.transactions
            waiting = _waiting_call(device_api, agent)
            frame = await asyncio.wait_for(anext(frames), timeout=20)
            await gateway.link_result(caller, DeviceResult(frame["callId"], "done", "on"))
            assert (await asyncio.wait_for(waiting, timeout=20)).json()["status"] == "done"
            if turn:
                assert COUNTS.transactions - before == 2  # the call and its answer
        # A row written with a plain wake, as another process writes one (this one did not hand it),
        # is read.
        await _written_elsewhere(gateway, frame["callId"], caller.device.device_uid)
        before = COUNTS.transactions
        frame = await asyncio.wait_for(anext(frames), timeout=20)
        assert frame["callId"] == "inv_from_elsewhere"
        assert COUNTS.transactions - before == 1  # the link's read
    finally:
        await frames.aclose()


async def test_a_long_poll_takes_a_call_written_in_its_process_without_reading_it(
    device_api: httpx.AsyncClient,
) -> None:
    """A long-poll that is waiting gets a call written in its process as the call's unit of work handed
    it: between the call and the poll's answer the only transaction is the call's own. A call written
    with a plain wake, as another process writes one, is read."""
    _, agent, lamp = await _lamp_and_agent(device_api)
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    hands = gateway.hands
    for turn in range(3):  # the first fills the caches
        await hands.flush()  # the marks of the turn before: written now, not inside the count below
        looked = COUNTS.transactions
        polling = asyncio.create_task(
            device_api.get("/v1/device/invocations", params={"wait": 20}, headers=bearer(lamp))
        )
        await _until(lambda looked=looked: COUNTS.transactions > looked)  # its first look read: it waits
        before, batches = COUNTS.transactions, hands.batches
        waiting = _waiting_call(device_api, agent)
        [call] = (await asyncio.wait_for(polling, timeout=20)).json()["invocations"]
        if turn:
            assert COUNTS.transactions - before - (hands.batches - batches) == 1  # the call's own
        await _answer(device_api, lamp, call["id"])
        assert (await asyncio.wait_for(waiting, timeout=20)).json()["status"] == "done"
    # A row written with a plain wake (this process did not hand it) is read.
    caller = await gateway.authenticate_device(lamp, present=False)
    await hands.flush()
    looked = COUNTS.transactions
    polling = asyncio.create_task(
        device_api.get("/v1/device/invocations", params={"wait": 20}, headers=bearer(lamp))
    )
    await _until(lambda: COUNTS.transactions > looked)
    await _written_elsewhere(gateway, call["id"], caller.device.device_uid)
    before, batches = COUNTS.transactions, hands.batches
    [call] = (await asyncio.wait_for(polling, timeout=20)).json()["invocations"]
    assert call["id"] == "inv_from_elsewhere"
    assert COUNTS.transactions - before - (hands.batches - batches) == 1  # the poll's read


async def _written_elsewhere(gateway: Any, answered_id: str, device_uid: str) -> None:
    """A new pending call for the device, a copy of an answered one, written with a plain wake as another
    process writes one (this process hands it nothing)."""
    [tenant] = await gateway.store.tenant_ids()
    async with gateway.store.unit_of_work(tenant) as uow:
        answered = await uow.invocations.get("ana", answered_id)
        assert answered is not None
        other = replace(
            answered,
            invocation_id="inv_from_elsewhere",
            status=Status.PENDING,
            resolved_at=None,
            message=None,
            delivered_at=None,
        )
        await uow.invocations.add(other)
        uow.notify(device_key(tenant, device_uid))


async def _until(condition: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not condition():
        assert loop.time() < deadline, "the condition never held"
        await asyncio.sleep(0.001)


async def test_a_wake_hands_its_values_only_to_a_waiter_nothing_else_woke() -> None:
    """``Wake.handed``: the values handed on a key since the waiter last cleared, or None as soon as a
    plain notification (another process's, a sweep's, a credential change's) set it too."""
    wake = LocalWake()
    woken = asyncio.Event()
    with wake.subscribe("k", swept=False, also=woken) as link, wake.subscribe("k") as plain:
        wake.hand("k", ["one"])
        wake.committed(["k", "other"], {"k": ["two"]})
        assert link.is_set() and woken.is_set() and plain.is_set()
        assert wake.handed(link) == ["one", "two"]
        assert wake.handed(plain) is None  # a waiter without ``also`` always reads
        link.clear()
        assert wake.handed(link) is None and not link.is_set()
        wake.hand("k", ["three"])
        wake.notify("k")
        assert wake.handed(link) is None  # something else woke it too: it reads
        link.clear()
        wake.notify("k")
        wake.hand("k", ["four"])
        assert wake.handed(link) is None
