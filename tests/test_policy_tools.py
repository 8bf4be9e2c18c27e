"""`tapgate policy check` and `tapgate policy explain`, and the rule named in every policy decision."""

from __future__ import annotations

import textwrap
from pathlib import Path

import httpx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tapgate.config import Settings
from tapgate.domain.policy import PolicyRequest, Verdict, decide, parse_policies
from tapgate.domain.policy_check import check_policies
from tapgate.domain.policy_explain import explain
from tests.conftest import asgi_client
from tests.live import tapgate, write_config
from tests.test_policy import policy_file, profiles, requests, rules
from tests.world import LAMP, THERMOMETER, World, bearer, device_body

LAMP_CALL = PolicyRequest(
    tool="device__desk_lamp__set_light",
    device_id="desk-lamp",
    capability="set_light",
    capability_kind="actuator",
    agent_id="claude",
    session_kind="chat",
    origin="owner",
)

RULES = """\
version: 1
policies:
  - name: no-shed
    condition: "tool matches ^device__shed_"
    decision: block
  - name: ask-lamp
    condition: "deviceId equals desk-lamp and capabilityKind equals actuator"
    decision: require_approval
    message: Lamp actions need a yes
  - name: night-bot
    condition: "agentId matches bot$"
    decision: block
"""


def _file(body: str) -> str:
    return "version: 1\npolicies:\n" + textwrap.dedent(body)


# --- check -------------------------------------------------------------------------------------------------


def test_a_clean_file_has_no_problems() -> None:
    assert check_policies(RULES) == []


def test_check_reports_every_broken_rule_with_its_line_not_only_the_first() -> None:
    problems = check_policies(
        _file("""\
          - name: a
            decision: maybe
          - name: b
            condition: "deviceId equals desk-lamp"
            decision: block
          - name: c
            condition: "colour equals red"
            decision: block
        """)
    )
    assert [(p.line, p.warning) for p in problems] == [(4, False), (9, False)]
    assert "'maybe' is not a decision" in problems[0].reason
    assert "unknown field 'colour'" in problems[1].reason


@pytest.mark.parametrize(
    ("condition", "needle"),
    [
        ("deviceId matches desk_lamp", "needs '_'"),  # device ids join words with '-'
        ("deviceId matches ^Desk", "needs 'D'"),
        ("tool matches 'device__desk-lamp__'", "needs '-'"),
        ("capability matches '(set)+ light'", "needs ' '"),
        ("sessionKind matches ^chats$", "finds none of them"),
        ("capabilityKind matches motor", "finds none of them"),
        ("origin equals agent", "origin is one of"),
        ("deviceId equals desk-lamp and deviceId equals hall-lamp", "cannot equal both"),
    ],
)
def test_check_warns_about_a_rule_that_can_never_match(condition: str, needle: str) -> None:
    [problem] = check_policies(_file(f'  - name: r\n    condition: "{condition}"\n    decision: block\n'))
    assert problem.warning and problem.line == 3
    assert problem.reason.startswith("the rule 'r' can never match") and needle in problem.reason
    assert problem.render("p.yaml").startswith("p.yaml:3: warning: the rule 'r' can never match")


@pytest.mark.parametrize(
    ("condition", "needle"),
    [
        ("deviceId matches 'desk(?:_lamp)+'", "needs '_'"),  # inside a group that must occur
        ("deviceId matches 'desk[_.]lamp'", "needs '[._]'"),  # a class with no character a device id holds
        ("deviceId matches 'desk(?P<n>_)'", "needs '_'"),
        ("deviceId matches '^desk.x{1,3}_'", "needs '_'"),
    ],
)
def test_check_reads_groups_classes_and_repeats_of_a_pattern_it_warns_about(
    condition: str, needle: str
) -> None:
    [problem] = check_policies(_file(f'  - name: r\n    condition: "{condition}"\n    decision: block\n'))
    assert problem.warning and needle in problem.reason


@pytest.mark.parametrize(
    "condition",
    [
        "deviceId matches 'desk(?:_lamp)?'",  # the group may be absent
        "deviceId matches 'desk(?:_lamp)*'",
        "deviceId matches '(a|_)b'",  # an alternative
        "deviceId matches 'desk(?!_)'",  # a look-ahead: not followed
        "deviceId matches '(?i:D)esk'",  # a scoped flag: not followed
        "deviceId matches 'desk(?#_)'",  # a comment
        "deviceId matches 'desk[^_]'",  # a negated class
        "deviceId matches '(?x) desk - lamp'",  # verbose: the spaces are not characters
    ],
)
def test_check_stays_silent_about_a_pattern_it_does_not_follow_rather_than_warn_wrongly(
    condition: str,
) -> None:
    assert check_policies(_file(f'  - name: r\n    condition: "{condition}"\n    decision: block\n')) == []


@pytest.mark.parametrize(
    "condition",
    [
        "deviceId matches (?i)^DESK",
        "deviceId matches 'desk|Hall'",
        "deviceId matches 'desk-.*'",
        "sessionKind matches ^chat$",
        "deviceId equals desk-lamp or deviceId matches Desk",
        "agentId matches Bot",
    ],
)
def test_check_stays_silent_about_a_rule_that_can_match(condition: str) -> None:
    assert check_policies(_file(f'  - name: r\n    condition: "{condition}"\n    decision: block\n')) == []


@pytest.mark.parametrize(
    ("first", "second", "shadowed_line"),
    [
        # a stricter rule without a condition shadows everything weaker
        ("decision: block", 'condition: "deviceId equals desk-lamp"\n    decision: allow', 5),
        # the stricter rule's condition is implied by the weaker one's
        (
            'condition: "deviceId in [desk-lamp, hall-lamp]"\n    decision: block',
            'condition: "deviceId equals desk-lamp and agentId equals claude"\n'
            "    decision: require_approval",
            6,
        ),
        # a stricter rule later in the file still wins
        (
            'condition: "agentId equals claude"\n    decision: allow',
            'condition: "agentId matches ^cl"\n    decision: block',
            3,
        ),
        # two equal rules: the first decides
        (
            'condition: "agentId equals claude"\n    decision: block',
            'condition: "agentId equals claude"\n    decision: block',
            6,
        ),
    ],
)
def test_check_warns_about_a_rule_shadowed_by_a_stricter_one(
    first: str, second: str, shadowed_line: int
) -> None:
    text = _file(f"  - name: one\n    {first}\n  - name: two\n    {second}\n")
    problems = check_policies(text)
    assert [(p.line, p.warning) for p in problems] == [(shadowed_line, True)]
    assert "never decides" in problems[0].reason


def test_a_weaker_rule_that_matches_more_calls_is_not_shadowed() -> None:
    text = _file("""\
      - name: block-night-bot
        condition: "agentId equals night-bot"
        decision: block
      - name: ask-everyone
        decision: require_approval
    """)
    assert check_policies(text) == []


def test_the_policy_check_command_prints_file_line_reason_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(
        _file("""\
          - name: a
            decision: maybe
          - name: b
            condition: "deviceId matches desk_lamp"
            decision: block
        """)
    )
    run = tapgate("policy", "check", str(path))
    assert run.returncode == 1, run.stderr
    assert run.stdout.splitlines() == [
        f"{path}:4: decision: 'maybe' is not a decision; decisions are allow, require_approval, block",
        f"{path}:5: warning: the rule 'b' can never match: deviceId matches 'desk_lamp' needs '_', "
        "and a device id is lower-case words joined by '-'",
    ]
    assert "1 error, 1 warning" in run.stderr


def test_the_policy_check_command_exits_0_on_a_clean_file_named_by_the_settings(tmp_path: Path) -> None:
    (tmp_path / "policies.yaml").write_text(RULES)
    config = write_config(tmp_path, "sqlite:///unused.db", policies_file="policies.yaml")
    run = tapgate("policy", "check", "--config", str(config))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().endswith("policies.yaml: 3 rules, no problems.")


def test_a_block_written_like_grep_blocks() -> None:
    """The bug this round fixed: ^device__shed_ never matched under fullmatch, so the block failed open."""
    shed = PolicyRequest(
        tool="device__shed__open_door", device_id="shed", capability="open_door", capability_kind="actuator"
    )
    decision = decide(parse_policies(RULES), shed)
    assert (decision.verdict, decision.rule, decision.line) == (Verdict.BLOCK, "no-shed", 3)


# --- explain (pure) ----------------------------------------------------------------------------------------


def test_explain_gives_decides_verdict_and_why_each_rule_did_or_did_not_match() -> None:
    policies = parse_policies(RULES)
    explained = explain(policies, LAMP_CALL)
    assert explained.decision == decide(policies, LAMP_CALL)
    assert explained.decision.rule == "ask-lamp"
    assert [(c.rule, c.line, c.matched) for c in explained.considered] == [
        ("no-shed", 3, False),
        ("ask-lamp", 6, True),
        ("night-bot", 10, False),
    ]
    no_shed, ask, night = explained.considered
    assert no_shed.why == "tool matches '^device__shed_' is false for 'device__desk_lamp__set_light'"
    assert ask.why == "deviceId equals 'desk-lamp' and capabilityKind equals 'actuator'"
    assert night.why == "agentId matches 'bot$' is false for 'claude'"


@pytest.mark.parametrize("agent", ["claude", "night-bot", ""])
@pytest.mark.parametrize("tool", ["device__desk_lamp__set_light", "device__shed__open_door", "phone_action"])
def test_explain_never_disagrees_with_decide(agent: str, tool: str) -> None:
    policies = parse_policies(RULES + "profile:\n  phone_action: require_approval\n")
    request = PolicyRequest(
        tool=tool, device_id="desk-lamp", capability="x", capability_kind="actuator", agent_id=agent
    )
    explained = explain(policies, request)
    assert explained.decision == decide(policies, request)
    matched = {c.rule for c in explained.considered if c.matched}
    assert explained.decision.rule in matched or explained.decision.rule == "tapgate:default"
    assert (explained.decision.rule == "tapgate:default") == (not matched)


# --- the rule in the agent's reason and the journal, and explain against a live database -------------------


async def _world(client: httpx.AsyncClient) -> tuple[World, str]:
    world = await World(client).start()
    await world.person("ana")
    agent = await world.agent("ana", "assistant")
    await world.enrol(
        "ana", device_body("desk-lamp", [LAMP, THERMOMETER], grants=["set_light", "read_temperature"])
    )
    await world.enrol("ana", device_body("shed", [LAMP | {"name": "open_door"}], grants=["open_door"]))
    return world, agent


async def _journal(world: World) -> list[dict[str, object]]:
    r = await world.client.get("/v1/audit?limit=1000", headers=bearer(world.operator))
    return list(r.json()["entries"])


async def test_a_refusal_and_an_approval_opened_by_policy_name_their_rule_and_line(
    tmp_path: Path, sqlite_url: str
) -> None:
    (tmp_path / "policies.yaml").write_text(RULES)
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        policies_file=str(tmp_path / "policies.yaml"),
    )
    async with asgi_client(settings) as client:
        world, agent = await _world(client)
        blocked = (
            await client.post(
                "/v1/invocations",
                json={"tool": "device__shed__open_door", "arguments": {"on": True}},
                headers=bearer(agent),
            )
        ).json()
        asked = (
            await client.post(
                "/v1/invocations",
                json={"tool": "device__desk_lamp__set_light", "arguments": {"on": True}},
                headers=bearer(agent),
            )
        ).json()
        assert blocked["reason"] == "[policy] the rule 'no-shed' (line 3) blocks this call"
        assert asked["status"] == "awaiting_approval"
        assert asked["reason"] == (
            "[policy] Lamp actions need a yes (rule 'ask-lamp', line 6); a standing mandate could cover "
            "calls like this one: ask the person for one (POST /v1/mandates)"
        )
        entries = {e["subject"]: e for e in await _journal(world)}
        assert dict(entries[blocked["id"]]["data"]).items() >= {"rule": "no-shed", "rule_line": 3}.items()
        assert entries[blocked["id"]]["reason"] == blocked["reason"]
        assert entries[asked["id"]]["action"] == "invocation.awaiting_approval"
        assert dict(entries[asked["id"]]["data"]).items() >= {"rule": "ask-lamp", "rule_line": 6}.items()


async def test_policy_explain_reads_the_live_database_and_creates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tapgate.db'}"
    (tmp_path / "policies.yaml").write_text(RULES)
    config = write_config(tmp_path, url, policies_file="policies.yaml")
    assert tapgate("migrate", "--config", str(config)).returncode == 0
    settings = Settings(
        database_url=url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        policies_file=str(tmp_path / "policies.yaml"),
    )
    async with asgi_client(settings) as client:
        world, _ = await _world(client)
        before = await _journal(world)
        explain_args = ("policy", "explain", "--config", str(config), "--tenant", "acme", "--user", "ana")
        lamp = tapgate(*explain_args, "--tool", "device__desk_lamp__set_light", "--agent", "claude")
        bot = tapgate(*explain_args, "--tool", "device__desk_lamp__read_temperature", "--agent", "night-bot")
        ungranted = await client.put(
            "/v1/users/ana/devices/shed/grants",
            json={"grants": {"open_door": False}},
            headers=bearer(world.operator),
        )
        assert ungranted.status_code == 200, ungranted.text
        shed = tapgate(*explain_args, "--tool", "device__shed__open_door")
        unknown = tapgate(*explain_args, "--tool", "device__shed__open_door", "--user", "bo")
        after = await _journal(world)
    assert lamp.returncode == 0, lamp.stderr
    lines = lamp.stdout.splitlines()
    assert lines[0] == "verdict: ask \u2014 Lamp actions need a yes (rule 'ask-lamp', line 6)"
    assert lines[1] == "decided by: ask-lamp (line 6)"
    assert "capabilityKind=actuator" in lines[2] and "agentId='claude'" in lines[2]
    assert lines[3] == "rules considered:"
    assert lines[4].split()[:4] == ["line", "3", "no-shed", "block"]
    assert "no match: tool matches '^device__shed_' is false for" in lines[4]
    assert "matched: deviceId equals 'desk-lamp'" in lines[5]
    assert "no match: agentId matches 'bot$' is false for 'claude'" in lines[6]
    assert bot.stdout.splitlines()[:2] == [
        "verdict: block \u2014 the rule 'night-bot' (line 10) blocks this call",
        "decided by: night-bot (line 10)",
    ]
    assert (
        shed.stdout.strip() == "verdict: refused before policy: [deny] capability not granted: "
        "the person has not granted open_door on shed"
    )
    assert unknown.returncode == 1 and "has no user 'bo'" in unknown.stderr
    # creating nothing: the journal (where every write leaves an entry) ends where it did, bar the grant
    assert [e["action"] for e in after[len(before) :]] == ["grants.changed"]


# --- properties over generated files and calls -----------------------------------------------------------


@settings(deadline=None)
@given(st.lists(rules, min_size=1, max_size=6), profiles, requests)
def test_explain_agrees_with_decide_and_with_each_rules_own_test(
    rule_list: list[dict[str, str]], profile: dict[str, str], the_call: PolicyRequest
) -> None:
    policies = policy_file(rule_list, profile)
    explained = explain(policies, the_call)
    assert explained.decision == decide(policies, the_call)
    by_name = {c.rule: c for c in explained.considered}
    for rule in policies.rules:
        assert by_name[rule.name].matched == rule.applies_to(the_call)


@settings(deadline=None)
@given(st.lists(rules, min_size=1, max_size=6), st.lists(requests, min_size=1, max_size=8))
def test_a_rule_that_check_warns_about_never_decides_a_call(
    rule_list: list[dict[str, str]], calls: list[PolicyRequest]
) -> None:
    policies = policy_file(rule_list)
    text = yaml.safe_dump(
        {"version": 1, "policies": [{"name": f"rule-{i}", **rule} for i, rule in enumerate(rule_list)]}
    )
    lines = {rule.line: rule for rule in policies.rules}
    warned = [lines[p.line] for p in check_policies(text) if p.warning]
    for rule in warned:
        for the_call in calls:
            decided = decide(policies, the_call)
            assert (decided.rule, decided.line) != (rule.name, rule.line)
