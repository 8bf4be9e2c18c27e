"""A scripted day of an assistant, played twice on a real gateway (SQLite): 60 calls (40 texts to three
contacts, 10 alarms, 10 lamp switches, 5 of them outside any bound), once without mandates and once with
three signed in the morning. It prints the cards the person had to sign and checks that every call
outside a bound still asked. The figures are in docs/mandates.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tapgate.config import Settings
from tapgate.domain.approvals import sign_decision, signed_text
from tests.conftest import asgi_client, tenant_name
from tests.reliability import report
from tests.world import LAMP, Key, World, bearer, device_body, new_key

SMS_TOOL = "device__ana_phone__sms_send"
ALARM_TOOL = "device__bedside_clock__set_alarm"
LAMP_TOOL = "device__desk_lamp__set_light"
ALARM = {
    "name": "set_alarm",
    "kind": "actuator",
    "description": "Set an alarm.",
    "params": {"time": {"type": "string", "required": True, "description": "HH:MM"}},
    "confirm": True,
}
CONTACTS = ["+447700900001", "+447700900002", "+447700900003"]
STRANGER = "+447700900999"
POLICIES = (
    "version: 1\npolicies:\n"
    "  - name: texts-ask\n    action: device_use\n"
    '    condition: "capability equals sms_send"\n    decision: require_approval\n'
    '    message: "texts are checked by the person"\n'
)
MANDATES = [
    {
        "tools": [SMS_TOOL],
        "constraints": {"to": {"one_of": CONTACTS}, "body": {"max_length": 160}},
        "max_calls": 200,
        "per_day": 40,
        "expires_in_seconds": 7 * 86400,
        "purpose": "texts to the family",
    },
    {
        "tools": [ALARM_TOOL],
        "constraints": {"time": {"matches": "^0[5-8]:[0-5][0-9]$"}},
        "max_calls": 50,
        "expires_in_seconds": 7 * 86400,
        "purpose": "morning alarms",
    },
    {
        "tools": [LAMP_TOOL],
        "constraints": {"brightness": {"max": 60}},
        "max_calls": 50,
        "expires_in_seconds": 7 * 86400,
        "purpose": "evening lights",
    },
]


def script() -> list[tuple[str, dict[str, Any], bool]]:
    """The day's 60 calls, each with whether it is outside every bound (5 are)."""
    calls: list[tuple[str, dict[str, Any], bool]] = []
    for i in range(38):
        calls.append((SMS_TOOL, {"to": CONTACTS[i % 3], "body": f"message {i}"}, False))
    calls += [(SMS_TOOL, {"to": STRANGER, "body": "hello"}, True)] * 2
    for i in range(9):
        calls.append((ALARM_TOOL, {"time": f"0{5 + i % 4}:{10 + i:02d}"}, False))
    calls.append((ALARM_TOOL, {"time": "03:00"}, True))
    for i in range(8):
        calls.append((LAMP_TOOL, {"on": i % 2 == 0, "brightness": 20 + 5 * i}, False))
    calls += [(LAMP_TOOL, {"on": True, "brightness": 100}, True)] * 2
    return calls


class Person:
    def __init__(self, world: World) -> None:
        self.world = world
        self.key: Key = new_key()
        self.tokens: dict[str, str] = {}

    async def build(self) -> Person:
        w = self.world
        await w.person("ana")
        self.tokens["agent"] = await w.agent("ana")
        self.tokens["phone"] = await w.enrol(
            "ana", device_body("ana-phone", [{"name": "sms_send"}], self.key, grants=["sms_send"])
        )
        await w.enrol("ana", device_body("desk-lamp", [LAMP | {"confirm": True}], grants=["set_light"]))
        await w.enrol("ana", device_body("bedside-clock", [ALARM], kind="clock", grants=["set_alarm"]))
        return self

    async def sign_mandates(self) -> int:
        client = self.world.client
        for body in MANDATES:
            r = await client.post("/v1/mandates", json=body, headers=bearer(self.tokens["agent"]))
            assert r.status_code == 202, r.text
            inbox = (await client.get("/v1/inbox", headers=bearer(self.tokens["phone"]))).json()["approvals"]
            [card] = [a for a in inbox if a["id"] == r.json()["approval_id"]]
            sign = card["sign"]
            text = signed_text(
                sign["format"], card["id"], "approved", card["kind"], card["subject"],
                sign["action_sha256"], sign["challenge"], sign["expires_at"],
            )  # fmt: skip
            body = {"decision": "approved", "signature": sign_decision(self.key.private, text)}
            decided = await client.post(
                f"/v1/approvals/{card['id']}", json=body, headers=bearer(self.tokens["phone"])
            )
            assert decided.status_code == 200, decided.text
        return len(MANDATES)

    async def play(self) -> tuple[int, int, int]:
        """Cards the calls opened, calls outside a bound that asked, SMS compose sheets opened."""
        cards = outside_asked = sheets = 0
        for tool, arguments, outside in script():
            r = await self.world.client.post(
                "/v1/invocations",
                json={"tool": tool, "arguments": arguments},
                headers=bearer(self.tokens["agent"]),
            )
            view = r.json()
            assert view["status"] in ("pending", "awaiting_approval"), view
            asked = view["status"] == "awaiting_approval"
            cards += asked
            outside_asked += asked and outside
            assert asked or not outside, (tool, arguments)  # a call outside every bound always asks
            sheets += tool == SMS_TOOL and not asked  # the phone's own Send still waits for the person
        return cards, outside_asked, sheets


@pytest.mark.parametrize("with_mandates", [False, True])
async def test_a_scripted_day_asks_the_person_only_outside_the_bounds_they_signed(
    with_mandates: bool, sqlite_url: str, tmp_path: Path
) -> None:
    policies = tmp_path / "policies.yaml"
    await anyio.Path(policies).write_text(POLICIES)
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        policies_file=str(policies),
        max_open_confirmations=1000,
    )
    async with asgi_client(settings) as client:
        person = await Person(await World(client, tenant=tenant_name()).start()).build()
        signed = await person.sign_mandates() if with_mandates else 0
        cards, outside_asked, sheets = await person.play()
    outside = sum(1 for *_, o in script() if o)
    assert len(script()) == 60 and outside == 5
    assert outside_asked == outside
    assert cards == (outside if with_mandates else 60)
    figures = {"calls": 60, "mandate_cards": signed, "call_cards": cards, "prompts": signed + cards}
    report(
        "mandates day " + ("with" if with_mandates else "without"),
        **figures,
        outside_asked=outside_asked,
        sms_send_sheets=sheets,
    )
