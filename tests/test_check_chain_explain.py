"""`tapgate policy explain` and an agent's call go through one check chain: for every generated call, the
verdict explain gives is the answer the call gets."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

from tapgate.config import Settings
from tapgate.domain.policy import Verdict
from tapgate.gateway import Gateway
from tapgate.services.policy_explain import Explained
from tests.conftest import asgi_client
from tests.world import APPROVALS, LAMP, THERMOMETER, World, bearer, device_body

RULES = """\
version: 1
profile:
  read_temperature: allow
policies:
  - name: no-shed
    condition: "tool matches ^device__shed_"
    decision: block
  - name: ask-lamp
    condition: "deviceId equals desk-lamp and capabilityKind equals actuator and origin equals owner"
    decision: require_approval
  - name: night-bot
    condition: "agentId matches bot$"
    decision: block
  - name: untrusted-asks
    condition: "origin equals untrusted"
    decision: require_approval
"""

TOOLS = (
    "device__desk_lamp__set_light",
    "device__desk_lamp__read_temperature",
    "device__desk_lamp__unlock_door",
    "device__desk_lamp__set_lihgt",  # a typo of a tool the person has
    "device__shed__open_door",  # granted, but a rule blocks it
    "device__shed__set_light",  # declared, never granted
    "device__garage__open_door",  # a device the person removed
    "device__attic__set_light",  # never a device of theirs
    "phone_action",  # needs a session, which no generated call has
    "send_sms",  # not a tool's name at all
)
AGENTS = ("claude", "night-bot")
ORIGINS = ("owner", "untrusted")


def _answer(explained: Explained) -> tuple[str, str]:
    """What explain says the call gets: its status, and the reason the agent reads (for a call let
    through, the rule)."""
    if explained.explanation is None:
        return "refused", explained.refused
    decision = explained.explanation.decision
    if decision.verdict is Verdict.BLOCK:
        return "refused", f"[policy] {decision.reason}"
    if decision.verdict is Verdict.ASK:
        return "awaiting_approval", f"[policy] {decision.reason}"
    return "pending", decision.rule


async def _called(world: World, token: str, tool: str, origin: str) -> tuple[str, str, dict[str, Any]]:
    r = await world.client.post(
        "/v1/invocations",
        json={"tool": tool, "arguments": {} if "temperature" in tool else {"on": True}, "origin": origin},
        headers=bearer(token),
    )
    assert r.status_code == 200, r.text
    view = r.json()
    return view["status"], view["reason"] or "", view


async def test_explain_gives_every_generated_call_the_answer_the_call_gets(
    tmp_path: Path, sqlite_url: str
) -> None:
    (tmp_path / "policies.yaml").write_text(RULES)
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        policies_file=str(tmp_path / "policies.yaml"),
        max_open_confirmations=1000,  # the cap on open cards is no part of what explain says
    )
    async with asgi_client(settings) as client:
        world = await World(client).start()
        user = await world.person("ana")
        tokens = {agent: await world.agent("ana", agent) for agent in AGENTS}
        await world.enrol(
            "ana",
            device_body(
                "desk-lamp",
                [LAMP, THERMOMETER, LAMP | {"name": "unlock_door", "confirm": True}],
                grants=["set_light", "read_temperature", "unlock_door"],
            ),
        )
        await world.enrol(
            "ana", device_body("shed", [LAMP | {"name": "open_door"}, LAMP], grants=["open_door"])
        )
        await world.enrol("ana", device_body("ana-phone", [APPROVALS]))  # someone can approve
        await world.enrol("ana", device_body("garage", [LAMP | {"name": "open_door"}], grants=["open_door"]))
        removed = await client.delete("/v1/users/ana/devices/garage", headers=bearer(world.operator))
        assert removed.status_code in (200, 204), removed.text
        gateway: Gateway = client.app.state.gateway  # type: ignore[attr-defined]
        person = await gateway.authenticate(user)
        calls = list(itertools.product((False, True), TOOLS, AGENTS, ORIGINS))
        random.Random(46).shuffle(calls)
        seen: set[str] = set()
        for paused, tool, agent, origin in sorted(calls, key=lambda c: c[0]):
            if paused != await gateway.agents_paused(person):
                await gateway.pause_agents(person, paused)
            explained = await gateway.explain_policy(world.tenant, "ana", tool, origin, "", agent)
            status, reason, view = await _called(world, tokens[agent], tool, origin)
            said, why = _answer(explained)
            case = f"{tool} by {agent} ({origin}{', paused' if paused else ''})"
            assert status == said, f"{case}: explain says {said} ({why}), the call got {view}"
            if status == "refused":
                assert reason == why, case
            if status == "awaiting_approval":  # an owner's call reads on: a mandate could spare the ask
                assert reason == why or reason.startswith(f"{why}; "), case
            seen.add(status)
        # the generated calls reach every answer: refused before policy, blocked, asked, and let through
        assert seen == {"refused", "awaiting_approval", "pending"}
