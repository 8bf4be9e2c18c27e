"""Sessions and the phone_action session tool; tool names; manifests under fuzzing."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapgate.domain.devices import CAPABILITY_NAME, PHONE_ACTIONS
from tapgate.domain.errors import InvalidInput
from tapgate.domain.tools import ToolName
from tests.world import LAMP, World, bearer, device_body

PHONE = {"name": PHONE_ACTIONS, "kind": "actuator", "description": "ignored: the server owns this one"}


@pytest.fixture
async def world(device_api: httpx.AsyncClient) -> World:
    return await World(device_api).start()


async def _session(world: World, agent: str, session_id: str = "chat-1", **body: object) -> None:
    r = await world.client.put(
        f"/v1/sessions/{session_id}", json={"kind": "chat", "attended": True, **body}, headers=bearer(agent)
    )
    assert r.status_code == 200, r.text


async def _message(world: World, agent: str, session_id: str, **body: object) -> httpx.Response:
    return await world.client.post(f"/v1/sessions/{session_id}/messages", json=body, headers=bearer(agent))


async def test_phone_action_appears_once_a_message_came_from_a_phone_and_stays(world: World) -> None:
    await world.person("ana")
    agent = await world.agent("ana")
    await world.enrol("ana", device_body("ana-phone", [PHONE, LAMP], grants=[PHONE_ACTIONS, "set_light"]))
    await _session(world, agent)
    assert await world.tool_names(agent, "chat-1") == ["device__ana_phone__set_light"]
    r = await _message(world, agent, "chat-1", device_id="ana-phone", capabilities=["phone_actions"])
    assert r.status_code == 201
    assert r.json() == {"session_id": "chat-1", "phone_action": True}
    assert await world.tool_names(agent, "chat-1") == ["device__ana_phone__set_light", "phone_action"]
    await _message(world, agent, "chat-1", capabilities=[])
    assert "phone_action" in await world.tool_names(agent, "chat-1")
    # Never a device__ tool, never outside the session.
    assert await world.tool_names(agent) == ["device__ana_phone__set_light"]
    await _session(world, agent, "chat-2")
    assert await world.tool_names(agent, "chat-2") == ["device__ana_phone__set_light"]


async def test_phone_action_needs_the_persons_grant_and_a_live_phone(world: World) -> None:
    user = await world.person("ana")
    agent = await world.agent("ana")
    await world.enrol("ana", device_body("ana-phone", [PHONE]))
    await _session(world, agent)
    await _message(world, agent, "chat-1", device_id="ana-phone", capabilities=["phone_actions"])
    assert await world.tool_names(agent, "chat-1") == []
    await world.client.put(
        "/v1/users/ana/devices/ana-phone/grants", json={"grants": {PHONE_ACTIONS: True}}, headers=bearer(user)
    )
    assert await world.tool_names(agent, "chat-1") == ["phone_action"]
    await world.client.delete("/v1/users/ana/devices/ana-phone", headers=bearer(user))
    assert await world.tool_names(agent, "chat-1") == []


async def test_the_server_owns_the_builtin_schemas(world: World) -> None:
    user = await world.person("ana")
    await world.enrol("ana", device_body("ana-phone", [PHONE, {"name": "sms_send", "kind": "sensor"}]))
    device = (await world.client.get("/v1/users/ana/devices", headers=bearer(user))).json()["devices"][0]
    caps = {c["name"]: c for c in device["capabilities"]}
    assert caps["sms_send"]["kind"] == "actuator"
    assert set(caps["sms_send"]["params"]) == {"to", "body"}
    assert caps[PHONE_ACTIONS]["description"] != PHONE["description"]


async def test_session_messages_are_checked(world: World) -> None:
    await world.person("ana")
    await world.person("bob")
    agent = await world.agent("ana")
    await world.enrol("bob", device_body("bob-phone", [PHONE], grants=[PHONE_ACTIONS]))
    assert (await _message(world, agent, "nope", capabilities=[])).status_code == 404
    await _session(world, agent)
    r = await _message(world, agent, "chat-1", device_id="bob-phone", capabilities=["phone_actions"])
    assert r.status_code == 422
    assert r.json()["error"]["message"].startswith("device_id")
    r = await _message(world, agent, "chat-1", capabilities=["phone_actions"])
    assert r.status_code == 422
    r = await world.client.put(
        "/v1/sessions/bad id", json={"kind": "chat", "attended": True}, headers=bearer(agent)
    )
    assert r.status_code == 422
    r = await world.client.put(
        "/v1/sessions/t", json={"kind": "triage", "attended": True}, headers=bearer(agent)
    )
    assert r.status_code == 422


async def test_another_agents_session_is_not_visible(world: World) -> None:
    await world.person("ana")
    first, second = await world.agent("ana", "first"), await world.agent("ana", "second")
    await _session(world, first)
    assert (await world.client.get("/v1/tools?session_id=chat-1", headers=bearer(second))).status_code == 404
    assert (await _message(world, second, "chat-1", capabilities=[])).status_code == 404


device_ids = st.from_regex(r"[a-z0-9]{1,6}(-[a-z0-9]{1,6}){0,2}", fullmatch=True).filter(
    lambda s: len(s) <= 24
)
capability_names = st.from_regex(r"[a-z][a-z0-9]{0,5}(_[a-z0-9]{1,5}){0,3}", fullmatch=True).filter(
    lambda s: len(s) <= 30
)


@given(device_ids, capability_names)
def test_tool_names_split_back_exactly(device_id: str, capability: str) -> None:
    name = ToolName(device_id, capability)
    assert ToolName.parse(str(name)) == name
    assert str(ToolName.parse(str(name))) == str(name)
    assert len(str(name)) <= 64


@given(st.text(max_size=80))
def test_anything_that_parses_as_a_tool_name_formats_back_to_itself(text: str) -> None:
    try:
        parsed = ToolName.parse(text)
    except InvalidInput:
        return
    assert str(parsed) == text
    assert CAPABILITY_NAME.fullmatch(parsed.capability)


hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\u202e", "\u200b", "\U000e0041", "\x00", "\n", "] [", "a" * 600, "", "__", "set__x"]),
)
param_specs = st.dictionaries(
    st.one_of(capability_names, hostile_text),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "number", "integer", "boolean", "enum", "tuple", 1])},
        optional={
            "required": st.one_of(st.booleans(), st.just("yes")),
            "description": hostile_text,
            "enum": st.lists(hostile_text, max_size=4),
        },
    ),
    max_size=3,
)
safe_text = st.text(st.characters(categories=["L", "N", "Zs", "P", "S"]), max_size=60)
valid_entries = st.fixed_dictionaries(
    {"name": capability_names, "kind": st.sampled_from(["sensor", "actuator"])},
    optional={
        "description": safe_text,
        "confirm": st.booleans(),
        "params": st.dictionaries(
            capability_names,
            st.one_of(
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["string", "number", "integer", "boolean"])},
                    optional={"required": st.booleans(), "description": safe_text},
                ),
                st.fixed_dictionaries(
                    {
                        "type": st.sampled_from(["enum", "string"]),
                        "enum": st.lists(safe_text.filter(bool), min_size=1, max_size=3, unique=True),
                    },
                    optional={"required": st.booleans()},
                ),
            ),
            max_size=4,
        ),
    },
)
hostile_entries = st.fixed_dictionaries(
    {"name": st.one_of(capability_names, hostile_text)},
    optional={
        "kind": st.sampled_from(["sensor", "actuator", "robot", None]),
        "description": hostile_text,
        "params": st.one_of(param_specs, st.just([])),
        "confirm": st.one_of(st.booleans(), st.just("no")),
        "extra": st.just(1),
    },
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    manifest=st.one_of(
        st.lists(valid_entries, max_size=4, unique_by=lambda e: e["name"]),
        st.lists(st.one_of(valid_entries, hostile_entries), max_size=4),
    )
)
async def test_random_and_hostile_manifests_are_accepted_whole_or_refused_with_422(
    device_api: httpx.AsyncClient, manifest: list[dict[str, object]]
) -> None:
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    tenants = await gateway.store.tenant_ids()
    if "fuzz" not in tenants:
        world = await World(device_api, tenant="fuzz").start()
        await world.person("ana")
        device_api.fuzz_operator = world.operator  # type: ignore[attr-defined]
    operator = device_api.fuzz_operator  # type: ignore[attr-defined]
    await device_api.delete("/v1/users/ana/devices/fuzzed", headers=bearer(operator))
    r = await device_api.post(
        "/v1/users/ana/devices", json=device_body("fuzzed", manifest, kind="box"), headers=bearer(operator)
    )
    assert r.status_code in (201, 422), r.text
    if r.status_code == 422:
        assert r.json()["error"]["message"]
        return
    stored = r.json()["device"]["capabilities"]
    for given_entry, kept in zip(manifest, stored, strict=True):
        assert kept["name"] == given_entry["name"]
        assert kept["granted"] is False
        if given_entry["name"] in ("sms_send", PHONE_ACTIONS):
            continue
        assert kept["kind"] == given_entry["kind"]
        assert kept["description"] == given_entry.get("description", "")
        assert kept["confirm"] == given_entry.get("confirm", False)
        assert list(kept["params"]) == list(given_entry.get("params", {}))
        for name, spec in given_entry.get("params", {}).items():
            assert kept["params"][name]["type"] == spec["type"]
            assert kept["params"][name]["required"] == spec.get("required", False)
            assert kept["params"][name].get("description", "") == spec.get("description", "")
            assert kept["params"][name].get("enum", []) == spec.get("enum", [])
    listed = (await device_api.get("/v1/users/ana/devices", headers=bearer(operator))).json()["devices"]
    assert [d["capabilities"] for d in listed if d["device_id"] == "fuzzed"] == [stored]
