"""The check chain of DESIGN §3.3, step by step, over the HTTP API in process with a frozen clock."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.logs import JsonFormatter
from tests.conftest import asgi_client
from tests.world import LAMP, THERMOMETER, World, bearer, device_body

PHONE = {"name": "phone_actions"}
SMS = {"name": "sms_send"}
CANARY = "zebra-canary-7731"


@pytest.fixture
async def world(device_api: httpx.AsyncClient) -> World:
    world = await World(device_api).start()
    await world.person("ana")
    world.agents["ana"] = await world.agent("ana")
    world.agents["lamp"] = await world.enrol(
        "ana",
        device_body(
            "desk-lamp",
            [LAMP, THERMOMETER, LAMP | {"name": "unlock_door", "confirm": True}],
            grants=["set_light", "unlock_door"],
        ),
    )
    world.agents["phone"] = await world.enrol(
        "ana",
        device_body(
            "ana-phone",
            [PHONE, SMS],
            grants=["phone_actions", "sms_send"],
            push={"kind": "fcm", "token": "t"},
        ),
    )
    return world


async def _invoke(world: World, tool: str, arguments: dict[str, object], **body: object) -> dict[str, object]:
    r = await world.client.post(
        "/v1/invocations",
        json={"tool": tool, "arguments": arguments, **body},
        headers=bearer(world.agents["ana"]),
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _chat(world: World, session_id: str = "chat-1", attended: bool = True, phone: bool = True) -> None:
    agent = bearer(world.agents["ana"])
    await world.client.put(
        f"/v1/sessions/{session_id}", json={"kind": "chat", "attended": attended}, headers=agent
    )
    body = {"device_id": "ana-phone", "capabilities": ["phone_actions"] if phone else []}
    r = await world.client.post(f"/v1/sessions/{session_id}/messages", json=body, headers=agent)
    assert r.status_code == 201, r.text


async def test_a_typo_in_a_tool_name_says_which_of_the_persons_tools_was_meant(world: World) -> None:
    view = await _invoke(world, "device__desk_lamp__set_lihgt", {"on": True})
    assert view["reason"] == "[deny] unknown tool; did you mean device__desk_lamp__set_light?"
    assert (await _invoke(world, "device__garage__open", {}))["reason"] == "[deny] unknown tool"


async def test_a_typo_is_never_matched_to_another_persons_tool(world: World) -> None:
    await world.person("bob")
    await world.enrol("bob", device_body("garage", [LAMP | {"name": "open_door"}], grants=["open_door"]))
    view = await _invoke(world, "device__garage__open_dor", {})
    assert view["reason"] == "[deny] unknown tool"


@pytest.mark.parametrize(
    ("tool", "arguments", "reason"),
    [
        ("device__nope__set_light", {"on": True}, "[deny] unknown tool"),
        ("device__desk_lamp__fly", {}, "[deny] unknown tool"),
        ("not a tool", {}, "[deny] unknown tool"),
        ("device__ana_phone__phone_actions", {"action": "torch"}, "[deny] unknown tool"),
        ("device__desk_lamp__read_temperature", {}, "[deny] capability not granted"),
        ("device__desk_lamp__set_light", {}, "[deny] on is required."),
        ("device__desk_lamp__set_light", {"on": "yes"}, "[deny] on must be true or false."),
        ("device__desk_lamp__set_light", {"on": True, "colour": "red"}, "[deny] colour is not a parameter"),
        (
            "device__desk_lamp__set_light",
            {"on": True, "scene": "disco"},
            "[deny] scene must be one of: warm, cold.",
        ),
        (
            "device__desk_lamp__set_light",
            {"on": True, "brightness": "40"},
            "[deny] brightness must be a number.",
        ),
        ("device__desk_lamp__set_light", {"on": True, "scene": "warm\u202e"}, "[deny] scene contains U+202E"),
        ("device__ana_phone__sms_send", {"to": "+15551234567"}, "[deny] body is required."),
        (
            "device__ana_phone__sms_send",
            {"to": "+15551234567", "body": "the key is AKIAIOSFODNN7EXAMPLE ok"},
            "[deny] the text of 'body' looks like a secret",
        ),
    ],
)
async def test_each_check_refuses_with_its_reason_and_writes_no_row(
    world: World, tool: str, arguments: dict[str, object], reason: str
) -> None:
    view = await _invoke(world, tool, arguments, invocation_id="refused-1")
    assert view["status"] == "refused"
    assert str(view["reason"]).startswith(reason), view
    assert view["result"] is None
    r = await world.client.get("/v1/invocations/refused-1", headers=bearer(world.agents["ana"]))
    assert r.status_code == 404
    entries = (await world.client.get("/v1/audit", headers=bearer(world.operator))).json()["entries"]
    refused = [e for e in entries if e["subject"] == "refused-1"]
    assert [(e["action"], e["reason"]) for e in refused] == [("invocation.refused", view["reason"])]
    assert "AKIA" not in json.dumps(entries)


async def test_the_device_channel_off_refuses_first(api: httpx.AsyncClient) -> None:
    world = await World(api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    r = await api.post("/v1/invocations", json={"tool": "device__lamp__set_light"}, headers=bearer(agent))
    assert r.json()["status"] == "refused"
    assert r.json()["reason"] == "[deny] the device channel is off on this gateway"


async def test_shadow_runs_are_always_refused_by_policy(world: World) -> None:
    view = await _invoke(world, "device__desk_lamp__set_light", {"on": True}, shadow=True)
    assert view["status"] == "refused"
    assert str(view["reason"]).startswith("[policy] ")


async def test_an_untrusted_turn_cannot_get_a_plain_allow_for_an_actuator_or_a_message(world: World) -> None:
    lamp = await _invoke(world, "device__desk_lamp__set_light", {"on": True}, origin="untrusted")
    sms = await _invoke(
        world, "device__ana_phone__sms_send", {"to": "+15551234567", "body": "hi"}, origin="untrusted"
    )
    for view in (lamp, sms):
        assert view["status"] == "awaiting_approval"  # raised to an ask: the person must sign
    door = await _invoke(world, "device__desk_lamp__unlock_door", {"on": True})
    assert door["status"] == "awaiting_approval"  # confirm: true asks on every call
    owner_sms = await _invoke(world, "device__ana_phone__sms_send", {"to": "+15551234567", "body": "hi"})
    assert owner_sms["status"] == "pending"  # the compose sheet's tap is the person's confirmation


async def test_phone_action_is_unavailable_outside_an_attended_phone_session(world: World) -> None:
    view = await _invoke(world, "phone_action", {"action": "torch", "on": True})
    assert view["status"] == "refused"  # no session: phone_action is not a tool here
    await _chat(world, attended=False)
    view = await _invoke(world, "phone_action", {"action": "torch", "on": True}, session_id="chat-1")
    assert view["status"] == "unavailable"
    from tapgate.domain.phone_action import unavailable_text

    assert view["reason"] == f"[deny] {unavailable_text()}"
    await _chat(world, attended=True, phone=False)
    view = await _invoke(world, "phone_action", {"action": "torch", "on": True}, session_id="chat-1")
    assert view["status"] == "unavailable"


async def test_phone_action_reaches_the_phone_checked_trimmed_and_answered_in_its_words(world: World) -> None:
    from tapgate.domain import phone_action

    await _chat(world)
    bad = await _invoke(world, "phone_action", {"action": "add_stop"}, session_id="chat-1")
    assert bad["status"] == "refused"
    assert bad["reason"] == "[deny] add_stop needs stop and destination."
    view = await _invoke(
        world,
        "phone_action",
        {"action": "torch", "on": True, "summary": "  light  ", "extra": "x"},
        session_id="chat-1",
    )
    assert view["status"] == "pending"
    phone = bearer(world.agents["phone"])
    [fetched] = (await world.client.get("/v1/device/invocations", headers=phone)).json()["invocations"]
    assert (
        fetched["arguments"]
        == phone_action.validate({"action": "torch", "on": True, "summary": "light"}).payload()
    )
    assert fetched["summary"] == "light"
    await world.client.post(
        f"/v1/device/invocations/{view['id']}/result",
        json={"status": "done", "message": "torch on"},
        headers=phone,
    )
    done = (
        await world.client.get(f"/v1/invocations/{view['id']}", headers=bearer(world.agents["ana"]))
    ).json()
    assert done["result"]["text"] == phone_action.result_text("done", "torch on", "torch")


async def test_the_input_is_copied_before_the_checks(world: World) -> None:
    """What the agent's dict holds after the call cannot change what reaches the device."""
    from tapgate.adapters.clock import FrozenClock  # noqa: F401  (the world's clock is frozen)

    view = await _invoke(world, "device__desk_lamp__set_light", {"on": True, "brightness": 10})
    lamp = bearer(world.agents["lamp"])
    [fetched] = (await world.client.get("/v1/device/invocations", headers=lamp)).json()["invocations"]
    assert fetched["id"] == view["id"]
    assert fetched["arguments"] == {"on": True, "brightness": 10}


async def test_an_expired_call_says_device_offline_and_the_sweep_finds_it(
    world: World, clock: FrozenClock
) -> None:
    view = await _invoke(world, "device__desk_lamp__set_light", {"on": True})
    clock.advance(301)
    gateway = world.client.app.state.gateway  # type: ignore[attr-defined]
    assert await gateway.sweep() == 1
    expired = (
        await world.client.get(f"/v1/invocations/{view['id']}", headers=bearer(world.agents["ana"]))
    ).json()
    assert expired["status"] == "expired"
    assert expired["result"]["text"].startswith("tool.device_offline")
    lamp = bearer(world.agents["lamp"])
    assert (await world.client.get("/v1/device/invocations", headers=lamp)).json() == {"invocations": []}


async def test_phone_action_waits_its_own_seconds_and_says_no_answer(
    world: World, clock: FrozenClock
) -> None:
    from tapgate.domain import phone_action

    await _chat(world)
    view = await _invoke(world, "phone_action", {"action": "torch", "on": True}, session_id="chat-1")
    clock.advance(phone_action.catalogue().wait_seconds)
    expired = (
        await world.client.get(f"/v1/invocations/{view['id']}", headers=bearer(world.agents["ana"]))
    ).json()
    assert expired["status"] == "expired"
    assert expired["result"]["text"] == phone_action.no_answer_text("torch")


async def test_a_result_racing_the_expiry_ends_in_exactly_one_state(world: World, clock: FrozenClock) -> None:
    gateway = world.client.app.state.gateway  # type: ignore[attr-defined]
    lamp = bearer(world.agents["lamp"])
    for _ in range(15):
        view = await _invoke(world, "device__desk_lamp__set_light", {"on": True})
        clock.advance(300)
        answer, _ = await asyncio.gather(
            world.client.post(
                f"/v1/device/invocations/{view['id']}/result", json={"status": "done"}, headers=lamp
            ),
            gateway.sweep(),
        )
        final = (
            await world.client.get(f"/v1/invocations/{view['id']}", headers=bearer(world.agents["ana"]))
        ).json()
        assert (answer.status_code, final["status"]) in ((200, "done"), (410, "expired"))
        entries = (await world.client.get("/v1/audit?limit=1000", headers=bearer(world.operator))).json()[
            "entries"
        ]
        ends = [
            e["action"]
            for e in entries
            if e["subject"] == view["id"] and e["action"] != "invocation.late_report"
        ]
        assert len(ends) == 2  # created, and one end


async def test_argument_text_never_reaches_a_log_line_or_the_journal(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Gate G11."""
    caplog.set_level(logging.DEBUG)
    await _chat(world)
    agent, phone = bearer(world.agents["ana"]), bearer(world.agents["phone"])
    sms = await _invoke(world, "device__ana_phone__sms_send", {"to": "+15551234567", "body": f"hi {CANARY}"})
    await _invoke(
        world, "device__ana_phone__sms_send", {"to": "+15551234567", "body": f"{CANARY} AKIAIOSFODNN7EXAMPLE"}
    )
    await _invoke(world, "device__desk_lamp__set_light", {"on": True, "scene": CANARY})
    await _invoke(world, "phone_action", {"action": "add_stop", "stop": CANARY}, session_id="chat-1")
    await world.client.post(
        f"/v1/device/invocations/{sms['id']}/result",
        json={"status": "sent", "message": CANARY},
        headers=phone,
    )
    await world.client.get(f"/v1/invocations/{sms['id']}", headers=agent)
    lines = [JsonFormatter().format(record) for record in caplog.records]
    assert lines
    assert not [line for line in lines if CANARY in line]
    journal = (await world.client.get("/v1/audit?limit=1000", headers=bearer(world.operator))).text
    assert CANARY not in journal


async def test_a_policy_file_blocks_and_its_message_reaches_the_agent(
    tmp_path: Path, sqlite_url: str
) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        "version: 1\npolicies:\n  - name: no-lamp-at-night\n    action: device_use\n"
        '    condition: "deviceId equals desk-lamp"\n    decision: block\n    message: "Not the lamp"\n'
    )
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        policies_file=str(policies),
    )
    async with asgi_client(settings) as client:
        world = await World(client).start()
        await world.person("ana")
        agent = await world.agent("ana")
        await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
        r = await client.post(
            "/v1/invocations",
            json={"tool": "device__desk_lamp__set_light", "arguments": {"on": True}},
            headers=bearer(agent),
        )
        assert r.json()["reason"] == "[policy] Not the lamp (rule 'no-lamp-at-night', line 3)"


def test_a_policy_file_that_does_not_parse_stops_the_server_with_its_line(tmp_path: Path) -> None:
    from tests.live import tapgate, write_config

    (tmp_path / "policies.yaml").write_text("version: 1\npolicies:\n  - name: x\n    decision: maybe\n")
    config = write_config(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite'}", policies_file="policies.yaml")
    assert tapgate("migrate", "--config", str(config)).returncode == 0
    run = tapgate("serve", "--config", str(config), "--port", "1")
    assert run.returncode == 1
    assert "policies.yaml line 4" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_two_results_for_one_invocation_record_exactly_one(
    backend: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    url = (
        request.getfixturevalue("sqlite_url")
        if backend == "sqlite"
        else request.getfixturevalue("postgres").app_url
    )
    settings = Settings(database_url=url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(settings, clock) as client:
        world = await World(client, tenant=f"race-{backend}-{id(client) % 10000}").start()
        await world.person("ana")
        agent = bearer(await world.agent("ana"))
        lamp = bearer(await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"])))
        for _ in range(30):
            r = await client.post(
                "/v1/invocations",
                json={"tool": "device__desk_lamp__set_light", "arguments": {"on": True}},
                headers=agent,
            )
            call_id = r.json()["id"]
            first, second = await asyncio.gather(
                client.post(
                    f"/v1/device/invocations/{call_id}/result", json={"status": "done"}, headers=lamp
                ),
                client.post(
                    f"/v1/device/invocations/{call_id}/result", json={"status": "failed"}, headers=lamp
                ),
            )
            assert sorted((first.status_code, second.status_code)) == [200, 409]
            winner = first if first.status_code == 200 else second
            view = (await client.get(f"/v1/invocations/{call_id}", headers=agent)).json()
            assert view["status"] == winner.json()["status"]
        entries = (await client.get("/v1/audit?limit=1000", headers=bearer(world.operator))).json()["entries"]
        assert sum(e["action"] == "invocation.answered" for e in entries) == 30
