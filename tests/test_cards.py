"""What an approval card says: who asks (the agent's name), what exactly (the manifest's labels), why it
is asked, and whether "this wasn't me" applies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tests.conftest import asgi_client
from tests.world import LAMP, World, bearer, device_body, new_key

LABELLED_LAMP = LAMP | {
    "label": "Switch the desk lamp",
    "params": {
        "on": {
            "type": "boolean",
            "required": True,
            "label": "Light",
            "true_label": "On",
            "false_label": "Off",
        },
        "brightness": {"type": "number", "label": "Brightness (%)"},
    },
}
HEATER = {"name": "heat", "kind": "actuator", "description": "Warm the room.", "confirm": True}
POLICIES = """version: 1
policies:
  - name: lamp-asks
    condition: "capability equals set_light"
    decision: require_approval
    message: Lights after dark need your yes
"""


@pytest.fixture
async def client(sqlite_url: str, clock: FrozenClock, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    policies = tmp_path / "policies.yaml"
    policies.write_text(POLICIES)
    settings = Settings(
        database_url=sqlite_url,
        policies_file=str(policies),
        device_channel_enabled=True,
        device_sms_enabled=True,
    )
    async with asgi_client(settings, clock) as c:
        yield c


class Ana(World):
    user = ""  # ana's user token: she reads her inbox with it


@pytest.fixture
async def world(client: httpx.AsyncClient) -> Ana:
    world = await Ana(client).start()
    world.user = await world.person("ana")
    await world.enrol("ana", device_body("ana-phone", [], new_key("p256")))
    await world.enrol("ana", device_body("desk-lamp", [LABELLED_LAMP], grants=["set_light"]))
    await world.enrol("ana", device_body("heater", [HEATER], grants=["heat"]))
    return world


async def _asked(world: Ana, agent: str, tool: str, arguments: dict[str, Any], **more: Any) -> dict[str, Any]:
    r = await world.client.post(
        "/v1/invocations", json={"tool": tool, "arguments": arguments, **more}, headers=bearer(agent)
    )
    assert r.json()["status"] == "awaiting_approval", r.text
    inbox = await world.client.get("/v1/inbox", headers=bearer(world.user))
    [approval] = [a for a in inbox.json()["approvals"] if a["binding_code"] == r.json()["binding_code"]]
    return dict(approval)


async def test_a_card_names_the_agent_as_its_token_was_named(world: Ana) -> None:
    planner = await world.token("ana", "agent", agent_id="planner", agent_name="Ana's planner")
    approval = await _asked(world, planner, "device__desk_lamp__set_light", {"on": True})
    assert approval["prompt"] == "Ana's planner asks to use Desk lamp: Switch the desk lamp."
    assert approval["preview"]["who"] == "Ana's planner"
    assert "planner" not in approval["prompt"].replace("Ana's planner", "")
    listed = await world.client.get("/v1/users/ana/tokens", headers=bearer(world.operator))
    names = [t["agent_name"] for t in listed.json()["tokens"] if t["agent_id"] == "planner"]
    assert names == ["Ana's planner"]


async def test_an_agent_without_a_name_is_your_assistant_never_its_id(world: Ana) -> None:
    unnamed = await world.agent("ana", "default")
    approval = await _asked(world, unnamed, "device__desk_lamp__set_light", {"on": True})
    assert approval["prompt"].startswith("Your assistant asks")
    assert approval["preview"]["who"] == "your assistant"
    assert "default" not in approval["prompt"]


async def test_a_card_shows_the_manifests_labels_and_a_boolean_as_its_label(world: Ana) -> None:
    agent = await world.agent("ana")
    on = await _asked(world, agent, "device__desk_lamp__set_light", {"on": True, "brightness": 40})
    assert on["preview"]["title"] == "Switch the desk lamp"
    assert on["preview"]["description"] == LAMP["description"]
    assert on["preview"]["fields"] == [
        {"label": "Light", "value": "On"},
        {"label": "Brightness (%)", "value": "40"},
    ]
    off = await _asked(world, agent, "device__desk_lamp__set_light", {"on": False})
    assert off["preview"]["fields"] == [{"label": "Light", "value": "Off"}]


async def test_a_boolean_without_labels_reads_yes_or_no(world: Ana) -> None:
    await world.enrol("ana", device_body("hall-lamp", [LAMP], grants=["set_light"]))
    approval = await _asked(world, await world.agent("ana"), "device__hall_lamp__set_light", {"on": False})
    assert approval["preview"]["fields"] == [{"label": "On", "value": "no"}]
    assert approval["preview"]["title"] == "Set light"


async def test_a_card_says_why_in_the_rules_own_words(world: Ana) -> None:
    approval = await _asked(world, await world.agent("ana"), "device__desk_lamp__set_light", {"on": True})
    assert approval["preview"]["why"] == "Lights after dark need your yes"


async def test_a_card_says_when_it_came_from_a_message_you_received(world: Ana) -> None:
    approval = await _asked(world, await world.agent("ana"), "device__heater__heat", {}, origin="untrusted")
    assert approval["preview"]["why"] == "it came from a message you received"


async def test_a_card_says_when_the_device_itself_asks_for_a_yes(world: Ana) -> None:
    approval = await _asked(world, await world.agent("ana"), "device__heater__heat", {})
    assert approval["preview"]["why"] == "the device asks for a yes"
    assert approval["agent_asks"] is True


@pytest.mark.parametrize(
    ("name", "says"),
    [("Ana\u202eplanner", "agent_name contains"), ("x" * 41, "agent_name")],
)
async def test_an_agent_name_a_card_could_not_show_is_refused(world: Ana, name: str, says: str) -> None:
    r = await world.client.post(
        "/v1/users/ana/tokens",
        json={"kind": "agent", "agent_name": name},
        headers=bearer(world.operator),
    )
    assert r.status_code == 422, r.text
    assert says in r.json()["error"]["message"]


async def test_a_user_token_takes_no_agent_name(world: Ana) -> None:
    r = await world.client.post(
        "/v1/users/ana/tokens", json={"kind": "user", "agent_name": "Ana"}, headers=bearer(world.operator)
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"] == "agent_name applies to agent tokens only."


async def test_a_label_on_a_param_that_is_no_boolean_cannot_be_true_or_false(world: Ana) -> None:
    bad = LAMP | {"params": {"brightness": {"type": "number", "true_label": "Bright"}}}
    r = await world.client.post(
        "/v1/users/ana/devices", json=device_body("odd-lamp", [bad]), headers=bearer(world.operator)
    )
    assert r.status_code == 422, r.text
    assert "true_label applies to a boolean parameter only" in r.json()["error"]["message"]


async def test_a_label_with_a_bidirectional_character_is_refused(world: Ana) -> None:
    bad = LAMP | {"label": "Switch \u202ethe lamp"}
    r = await world.client.post(
        "/v1/users/ana/devices", json=device_body("odd-lamp", [bad]), headers=bearer(world.operator)
    )
    assert r.status_code == 422, r.text
    assert "capabilities[0].label" in r.json()["error"]["message"]
