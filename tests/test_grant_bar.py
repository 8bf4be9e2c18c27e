"""A changed capability loses its grant (§15): a device re-declaring a granted capability with another
kind, ``confirm`` or params asks the person again, so it can never lower its own bar."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tapgate.domain.events import TOOLS_CHANGED
from tapgate.gateway import Gateway
from tapgate.services import events
from tests.world import LAMP, World, bearer, device_body

CONFIRMED_LAMP = LAMP | {"confirm": True}


@pytest.fixture
async def world(device_api: httpx.AsyncClient) -> World:
    return await World(device_api).start()


async def _changes(world: World, agent: str) -> list[dict[str, Any]]:
    gateway: Gateway = world.client.app.state.gateway  # type: ignore[attr-defined]
    caller = await gateway.authenticate(agent)
    return [dict(e.data) for e in await events.read(gateway.ctx, caller, 0) if e.type == TOOLS_CHANGED]


async def _redeclare(world: World, token: str, capability: dict[str, Any]) -> None:
    r = await world.client.put(
        "/v1/device/capabilities", json={"capabilities": [capability]}, headers=bearer(token)
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "lowered",
    [
        LAMP | {"granted": True},  # confirm dropped, and the device claims the grant itself
        CONFIRMED_LAMP | {"params": LAMP["params"] | {"raw": {"type": "string"}}, "granted": True},
        CONFIRMED_LAMP | {"kind": "sensor"},
    ],
    ids=["confirm", "params", "kind"],
)
async def test_a_device_that_changes_a_granted_capability_loses_its_grant(
    world: World, lowered: dict[str, Any]
) -> None:
    await world.person("ana")
    agent = await world.agent("ana")
    lamp = await world.enrol("ana", device_body("desk-lamp", [CONFIRMED_LAMP], grants=["set_light"]))
    assert await world.tool_names(agent) == ["device__desk_lamp__set_light"]

    await _redeclare(world, lamp, lowered)

    assert await world.tool_names(agent) == []
    assert (await _changes(world, agent))[-1] == {"change": "capabilities", "device_id": "desk-lamp"}
    entries = (await world.client.get("/v1/audit", headers=bearer(world.operator))).json()["entries"]
    declared = [e for e in entries if e["action"] == "device.capabilities_declared"]
    assert declared[-1]["data"]["grants_removed"] == "set_light"


async def test_a_device_that_redeclares_a_granted_capability_unchanged_keeps_its_grant(world: World) -> None:
    await world.person("ana")
    agent = await world.agent("ana")
    lamp = await world.enrol("ana", device_body("desk-lamp", [CONFIRMED_LAMP], grants=["set_light"]))
    await _redeclare(world, lamp, CONFIRMED_LAMP | {"description": "The lamp by the desk."})
    assert await world.tool_names(agent) == ["device__desk_lamp__set_light"]
