"""Grants take one shape everywhere: a list of capability names, or an object of names and true/false, at
enrolment, at consent and at PUT …/grants."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.world import LAMP, THERMOMETER, World, bearer, device_body

AS_LIST: Any = ["set_light"]
AS_OBJECT: Any = {"set_light": True, "read_temperature": False}
WRONG = [{"set_light": "yes"}, "set_light", [1], 7]


@pytest.fixture
async def world(device_api: httpx.AsyncClient) -> World:
    return await World(device_api).start()


def _granted(answer: httpx.Response) -> dict[str, bool]:
    assert answer.is_success, answer.text
    return {c["name"]: c["granted"] for c in answer.json()["device"]["capabilities"]}


async def _enrol(world: World, grants: object) -> httpx.Response:
    body = device_body("desk-lamp", [LAMP, THERMOMETER]) | {"grants": grants}
    return await world.client.post("/v1/users/ana/devices", json=body, headers=bearer(world.operator))


async def _consent(world: World, grants: object) -> httpx.Response:
    user = await world.token("ana", "user")
    started = (await world.client.post("/v1/users/ana/pairings", headers=bearer(user))).json()
    claim = await world.client.post(
        "/v1/pair", json={"code": started["code"], **device_body("desk-lamp", [LAMP, THERMOMETER])}
    )
    body = {"comparison_code": claim.json()["comparison_code"], "approved": True, "grants": grants}
    return await world.client.post(
        f"/v1/pairings/{started['pairing_id']}/consent", json=body, headers=bearer(user)
    )


async def _put(world: World, grants: object) -> httpx.Response:
    r = await _enrol(world, [])
    assert r.status_code == 201, r.text
    return await world.client.put(
        "/v1/users/ana/devices/desk-lamp/grants", json={"grants": grants}, headers=bearer(world.operator)
    )


ROUTES = {"enrolment": _enrol, "consent": _consent, "put": _put}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("grants", [AS_LIST, AS_OBJECT], ids=["list", "object"])
async def test_every_route_takes_grants_as_a_list_or_an_object(world: World, route: str, grants: Any) -> None:
    await world.person("ana")
    assert _granted(await ROUTES[route](world, grants)) == {"set_light": True, "read_temperature": False}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("grants", WRONG, ids=["object-of-text", "text", "list-of-numbers", "number"])
async def test_every_route_refuses_another_shape_with_the_same_sentence(
    world: World, route: str, grants: object
) -> None:
    await world.person("ana")
    r = await ROUTES[route](world, grants)
    assert r.status_code == 422
    assert r.json()["error"]["message"] == (
        'grants must be a list of capability names (["set_light"]) or an object of capability names and '
        'true or false ({"set_light": true}).'
    )


async def test_put_with_a_list_grants_those_and_leaves_the_others(world: World) -> None:
    await world.person("ana")
    await _put(world, ["read_temperature"])
    r = await world.client.put(
        "/v1/users/ana/devices/desk-lamp/grants",
        json={"grants": ["set_light"]},
        headers=bearer(world.operator),
    )
    assert _granted(r) == {"set_light": True, "read_temperature": True}
