"""The tool list's change signal: a ``tools.changed`` event (ids and a word, never text) for each change
an agent could see, none for a change it could not, and ``Gateway.tool_changes`` yielding the new list."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from tapgate.domain.devices import PHONE_ACTIONS
from tapgate.domain.events import TOOLS_CHANGED
from tapgate.gateway import Gateway
from tapgate.services import events
from tests.world import LAMP, THERMOMETER, World, bearer, device_body


@pytest.fixture
async def world(device_api: httpx.AsyncClient) -> World:
    return await World(device_api).start()


def _gateway(world: World) -> Gateway:
    gateway: Gateway = world.client.app.state.gateway  # type: ignore[attr-defined]
    return gateway


async def _changes(world: World, agent: str) -> list[dict[str, Any]]:
    gateway = _gateway(world)
    caller = await gateway.authenticate(agent)
    return [dict(e.data) for e in await events.read(gateway.ctx, caller, 0) if e.type == TOOLS_CHANGED]


async def test_each_change_an_agent_could_see_is_one_text_free_tools_changed_event(world: World) -> None:
    user = await world.person("ana")
    agent = await world.agent("ana")
    await world.enrol("ana", device_body("desk-lamp", [LAMP, THERMOMETER], grants=["set_light"]))
    lamp = (await world.client.get("/v1/users/ana/devices", headers=bearer(user))).json()
    assert lamp["devices"][0]["device_id"] == "desk-lamp"
    grants = "/v1/users/ana/devices/desk-lamp/grants"

    await world.client.put(grants, json={"grants": {"read_temperature": True}}, headers=bearer(user))
    await world.client.put(grants, json={"grants": {"read_temperature": True}}, headers=bearer(user))  # no-op
    token = await world.enrol("ana", device_body("ana-phone", [{"name": PHONE_ACTIONS}]))  # nothing granted
    await world.client.put(
        "/v1/device/capabilities",
        json={"capabilities": [{"name": PHONE_ACTIONS}, LAMP]},
        headers=bearer(token),
    )  # the lamp is added ungranted: nothing an agent sees
    await world.client.delete("/v1/users/ana/devices/desk-lamp", headers=bearer(user))

    assert await _changes(world, agent) == [
        {"change": "enrolled", "device_id": "desk-lamp"},
        {"change": "grants", "device_id": "desk-lamp"},
        {"change": "revoked", "device_id": "desk-lamp"},
    ]


async def test_a_redeclared_manifest_and_a_sessions_phone_announce_a_change(world: World) -> None:
    user = await world.person("ana")
    agent = await world.agent("ana")
    phone = await world.enrol(
        "ana", device_body("ana-phone", [{"name": PHONE_ACTIONS}, LAMP], grants=[PHONE_ACTIONS, "set_light"])
    )
    assert user
    await world.client.put(
        "/v1/device/capabilities", json={"capabilities": [{"name": PHONE_ACTIONS}]}, headers=bearer(phone)
    )  # set_light is gone
    await world.client.put(
        "/v1/sessions/chat-1", json={"kind": "chat", "attended": True}, headers=bearer(agent)
    )
    for _ in range(2):  # the phone_action tool appears once
        r = await world.client.post(
            "/v1/sessions/chat-1/messages",
            json={"device_id": "ana-phone", "capabilities": [PHONE_ACTIONS]},
            headers=bearer(agent),
        )
        assert r.status_code == 201

    assert (await _changes(world, agent))[1:] == [
        {"change": "capabilities", "device_id": "ana-phone"},
        {"change": "session", "session_id": "chat-1"},
    ]


async def test_tool_changes_yields_the_list_now_and_then_each_new_list(world: World) -> None:
    user = await world.person("ana")
    agent = await world.agent("ana")
    await world.enrol("ana", device_body("desk-lamp", [LAMP, THERMOMETER], grants=["set_light"]))
    gateway = _gateway(world)
    caller = await gateway.authenticate(agent)
    lists = gateway.tool_changes(caller)
    grants = "/v1/users/ana/devices/desk-lamp/grants"

    with anyio.fail_after(5):
        now = await anext(lists)
        await world.client.put(grants, json={"grants": {"read_temperature": True}}, headers=bearer(user))
        added = await anext(lists)
        await world.client.delete("/v1/users/ana/devices/desk-lamp", headers=bearer(user))
        removed = await anext(lists)
    await lists.aclose()

    assert [t["name"] for t in now] == ["device__desk_lamp__set_light"]
    assert [t["name"] for t in added] == [
        "device__desk_lamp__set_light",
        "device__desk_lamp__read_temperature",
    ]
    assert removed == []
