"""The policy engine: its condition language, how a call is decided, and the file it refuses, by line."""

from __future__ import annotations

import itertools
import re
import textwrap
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tapgate.domain.errors import ConfigurationError, PolicyFileError
from tapgate.domain.policy import (
    DEFAULT_PROFILE,
    FIELDS,
    Comparison,
    Operator,
    PolicyDecision,
    PolicyRequest,
    PolicyRule,
    PolicySet,
    Verdict,
    decide,
    parse_policies,
    parse_policies_reporting,
)

STRICTNESS = {Verdict.ALLOW: 0, Verdict.ASK: 1, Verdict.BLOCK: 2}

# The call most cases start from: an agent switching the desk lamp in a chat the person is in.
LAMP: dict[str, Any] = {
    "tool": "device__desk_lamp__set_light",
    "device_id": "desk-lamp",
    "capability": "set_light",
    "capability_kind": "actuator",
    "agent_id": "claude",
    "session_id": "s-1",
    "session_kind": "chat",
    "origin": "owner",
}
SMS: dict[str, Any] = {
    **LAMP,
    "tool": "device__phone__sms_send",
    "device_id": "phone",
    "capability": "sms_send",
    "capability_kind": "sensor",  # so only its being a message can make it consequential
}
PHONE_ACTION: dict[str, Any] = {**SMS, "tool": "phone_action", "capability": "phone_actions"}
THERMOMETER: dict[str, Any] = {
    **LAMP,
    "tool": "device__desk_lamp__read_temp",
    "capability": "read_temp",
    "capability_kind": "sensor",
}


def call(base: dict[str, Any] = LAMP, **changes: Any) -> PolicyRequest:
    return PolicyRequest(**{**base, **changes})


def load(body: str) -> PolicySet:
    return parse_policies("version: 1\n" + textwrap.dedent(body))


def one_rule(condition: str, decision: str = "block") -> PolicySet:
    return parse_policies(
        yaml.safe_dump(
            {"version": 1, "policies": [{"name": "r", "condition": condition, "decision": decision}]}
        )
    )


# --- the condition language ----------------------------------------------------------------------------

CONDITIONS = [
    # equals / not equals, compared whole
    ("deviceId equals desk-lamp", {}, True),
    ("deviceId equals desk-lamp", {"device_id": "hall-lamp"}, False),
    ("deviceId equals desk", {}, False),
    ("deviceId not equals desk-lamp", {}, False),
    ("deviceId not equals desk-lamp", {"device_id": "hall-lamp"}, True),
    # in: a bracketed, comma-separated list, items bare or quoted
    ("deviceId in [hall-lamp, desk-lamp]", {}, True),
    ("deviceId in [hall-lamp, porch-lamp]", {}, False),
    ("deviceId in [desk-lamp]", {}, True),
    ("agentId in [gpt,claude]", {}, True),
    ("agentId in ['night bot', gpt]", {"agent_id": "night bot"}, True),
    ("agentId in ['night bot', gpt]", {"agent_id": "night"}, False),
    ('agentId in ["a, b", c]', {"agent_id": "a, b"}, True),
    ('agentId in ["a, b", c]', {"agent_id": "a"}, False),
    # matches: a Python regular expression found anywhere in the value; ^ and $ anchor it
    ("tool matches 'device__.*__set_light'", {}, True),
    ("tool matches set_light", {}, True),
    ("tool matches ^set_light", {}, False),
    ("tool matches ^device__desk_", {}, True),
    ("tool matches ^device__shed_", {}, False),
    ("tool matches set_light$", {}, True),
    ("tool matches set_$", {}, False),
    ("tool matches .*set_light", {}, True),
    ("deviceId matches ^desk-lamp$", {}, True),
    ("deviceId matches ^desk-lamp$", {"device_id": "desk-lamp-2"}, False),
    ("deviceId matches ^desk$", {}, False),
    ("deviceId matches [a-z]+-lamp", {}, True),
    ("deviceId matches [a-z]+-lamp", {"device_id": "lamp-2"}, False),
    ("deviceId matches ^[a-z]+-lamp$", {"device_id": "desk-lamp-2"}, False),
    ("agentId matches '(?i)CLAUDE|gpt'", {}, True),
    ("agentId matches 'night bot'", {"agent_id": "night bot"}, True),
    # quoting: single or double quotes hold spaces and the other quote; '' is a missing field
    ("agentId equals 'night bot'", {"agent_id": "night bot"}, True),
    ('agentId equals "night bot"', {"agent_id": "night bot"}, True),
    ("agentId equals 'night bot'", {"agent_id": "night"}, False),
    ('agentId equals "it\'s me"', {"agent_id": "it's me"}, True),
    ("agentId equals 'and'", {"agent_id": "and"}, True),
    ("agentId equals ''", {"agent_id": ""}, True),
    ("agentId equals ''", {}, False),
    ("agentId not equals ''", {}, True),
    # and / or, and binding tighter than or
    ("deviceId equals desk-lamp and agentId equals claude", {}, True),
    ("deviceId equals desk-lamp and agentId equals gpt", {}, False),
    ("deviceId equals hall-lamp and agentId equals claude", {}, False),
    ("deviceId equals hall-lamp or agentId equals claude", {}, True),
    ("deviceId equals desk-lamp or agentId equals gpt", {}, True),
    ("deviceId equals hall-lamp or agentId equals gpt", {}, False),
    ("deviceId equals hall-lamp and capabilityKind equals actuator or agentId equals claude", {}, True),
    ("agentId equals claude or deviceId equals hall-lamp and capabilityKind equals sensor", {}, True),
    ("agentId equals gpt or deviceId equals desk-lamp and capabilityKind equals sensor", {}, False),
    ("deviceId equals desk-lamp and capabilityKind equals actuator and agentId equals claude", {}, True),
    ("deviceId equals desk-lamp and capabilityKind equals actuator and agentId equals gpt", {}, False),
    ("agentId equals a or agentId equals b or agentId equals claude", {}, True),
    ("agentId equals a or agentId equals b or agentId equals c", {}, False),
    ("  deviceId   equals\tdesk-lamp  ", {}, True),
    # every field, matching and not
    ("deviceId equals desk-lamp", {}, True),
    ("capability equals set_light", {}, True),
    ("capability equals set_light", {"capability": "set_colour"}, False),
    ("capabilityKind equals actuator", {}, True),
    ("capabilityKind equals sensor", {}, False),
    ("tool equals device__desk_lamp__set_light", {}, True),
    ("tool equals phone_action", {}, False),
    ("agentId equals claude", {}, True),
    ("agentId equals claude", {"agent_id": "gpt"}, False),
    ("sessionId equals s-1", {}, True),
    ("sessionId equals s-1", {"session_id": "s-2"}, False),
    ("sessionKind equals chat", {}, True),
    ("sessionKind equals chat", {"session_kind": "triage"}, False),
    ("origin equals owner", {}, True),
    ("origin equals owner", {"origin": "device"}, False),
    # a bare word ends at a space (and in a list at ',' or ']'), whatever letters it holds
    ("agentId equals XY", {"agent_id": "XY"}, True),
    ("agentId in [X1, Y]", {"agent_id": "X1"}, True),
]


@pytest.mark.parametrize(("condition", "changes", "matches"), CONDITIONS)
def test_a_condition_matches_exactly_the_calls_it_describes(
    condition: str, changes: dict[str, Any], matches: bool
) -> None:
    decision = decide(one_rule(condition), call(**changes))
    assert (decision.verdict, decision.rule) == (
        (Verdict.BLOCK, "r") if matches else (Verdict.ALLOW, "tapgate:default")
    )


def test_the_conditions_cover_every_field_and_operator() -> None:
    text = " ".join(condition for condition, _, _ in CONDITIONS)
    assert all(f"{name} " in text for name in FIELDS)
    assert all(f" {operator.value} " in text for operator in Operator)


def test_a_condition_is_parsed_once_into_groups_where_and_binds_tighter_than_or() -> None:
    (rule,) = load("""
        policies:
          - name: r
            condition: "agentId equals a or agentId in [b, 'c d'] and tool matches 'x.*'"
            decision: block
    """).rules
    assert rule.condition == (
        (Comparison("agentId", Operator.EQUALS, "a"),),
        (
            Comparison("agentId", Operator.IN, frozenset({"b", "c d"})),
            Comparison("tool", Operator.MATCHES, re.compile("x.*")),
        ),
    )


# --- deciding -----------------------------------------------------------------------------------------

ASK_LAMP = """
  - name: ask-lamp
    condition: deviceId equals desk-lamp
    decision: require_approval
"""
BLOCK_LAMP = """
  - name: block-lamp
    condition: capabilityKind equals actuator
    decision: block
    message: No lamps tonight
"""
ALLOW_LAMP = """
  - name: allow-lamp
    condition: agentId equals claude
    decision: allow
"""
BLOCK_SMS = """
  - name: block-sms
    condition: capability equals sms_send
    decision: block
"""

DECISIONS = [
    # nothing matches: the grant is the yes
    ("", LAMP, {}, Verdict.ALLOW, "tapgate:default"),
    ("policies:" + ASK_LAMP, LAMP, {"device_id": "hall-lamp"}, Verdict.ALLOW, "tapgate:default"),
    ("policies:" + ALLOW_LAMP, LAMP, {}, Verdict.ALLOW, "allow-lamp"),
    ("policies:\n  - name: all\n    decision: require_approval\n", THERMOMETER, {}, Verdict.ASK, "all"),
    # strictest wins, and among equals the first rule in the file
    ("policies:" + ALLOW_LAMP + ASK_LAMP, LAMP, {}, Verdict.ASK, "ask-lamp"),
    ("policies:" + ASK_LAMP + ALLOW_LAMP, LAMP, {}, Verdict.ASK, "ask-lamp"),
    ("policies:" + ASK_LAMP + ASK_LAMP.replace("ask-lamp", "ask-2"), LAMP, {}, Verdict.ASK, "ask-lamp"),
    ("policies:" + ASK_LAMP.replace("ask-lamp", "ask-2") + ASK_LAMP, LAMP, {}, Verdict.ASK, "ask-2"),
    # the default profile allows sms_send and phone_action; the file's entries replace it
    ("", SMS, {}, Verdict.ALLOW, "profile:sms_send"),
    ("", PHONE_ACTION, {}, Verdict.ALLOW, "profile:phone_action"),
    ("profile:\n  sms_send: require_approval\n", SMS, {}, Verdict.ASK, "profile:sms_send"),
    ("profile:\n  sms_send: block\n", SMS, {}, Verdict.BLOCK, "profile:sms_send"),
    ("profile:\n  phone_action: require_approval\n", PHONE_ACTION, {}, Verdict.ASK, "profile:phone_action"),
    ("profile:\n  sms_send: block\n", PHONE_ACTION, {}, Verdict.ALLOW, "profile:phone_action"),
    # a capability key matches it on every device; a tool key only that tool, and wins over the other
    (
        "profile:\n  set_light: block\n",
        LAMP,
        {"tool": "device__hall__set_light"},
        Verdict.BLOCK,
        "profile:set_light",
    ),
    (
        "profile:\n  device__desk_lamp__set_light: block\n",
        LAMP,
        {},
        Verdict.BLOCK,
        "profile:device__desk_lamp__set_light",
    ),
    ("profile:\n  device__desk_lamp__set_light: block\n", THERMOMETER, {}, Verdict.ALLOW, "tapgate:default"),
    ("profile:\n  device__hall__set_light: block\n", LAMP, {}, Verdict.ALLOW, "tapgate:default"),
    (
        "profile:\n  set_light: block\n  device__desk_lamp__set_light: allow\n",
        LAMP,
        {},
        Verdict.ALLOW,
        "profile:device__desk_lamp__set_light",
    ),
    (
        "profile:\n  device__phone__sms_send: require_approval\n",
        SMS,
        {},
        Verdict.ASK,
        "profile:device__phone__sms_send",
    ),
    # the profile and the rules: strictest wins, a rule over the profile between equals
    ("policies:" + BLOCK_SMS, SMS, {}, Verdict.BLOCK, "block-sms"),
    ("profile:\n  set_light: block\npolicies:" + ALLOW_LAMP, LAMP, {}, Verdict.BLOCK, "profile:set_light"),
    (
        "profile:\n  set_light: require_approval\npolicies:" + ALLOW_LAMP,
        LAMP,
        {},
        Verdict.ASK,
        "profile:set_light",
    ),
    ("profile:\n  set_light: require_approval\npolicies:" + ASK_LAMP, LAMP, {}, Verdict.ASK, "ask-lamp"),
    (
        "profile:\n  set_light: require_approval\npolicies:" + BLOCK_LAMP,
        LAMP,
        {},
        Verdict.BLOCK,
        "block-lamp",
    ),
    # a shadow run is always refused
    ("", LAMP, {"shadow": True}, Verdict.BLOCK, "tapgate:shadow"),
    ("", THERMOMETER, {"shadow": True}, Verdict.BLOCK, "tapgate:shadow"),
    ("", SMS, {"shadow": True}, Verdict.BLOCK, "tapgate:shadow"),
    (
        "profile:\n  set_light: allow\npolicies:" + ALLOW_LAMP,
        LAMP,
        {"shadow": True},
        Verdict.BLOCK,
        "tapgate:shadow",
    ),
    # an untrusted turn never gets a plain allow for an actuator or a message; a sensor it may read
    ("", LAMP, {"origin": "untrusted"}, Verdict.ASK, "tapgate:untrusted-origin"),
    ("", SMS, {"origin": "untrusted"}, Verdict.ASK, "tapgate:untrusted-origin"),
    ("", PHONE_ACTION, {"origin": "untrusted"}, Verdict.ASK, "tapgate:untrusted-origin"),
    (
        "",
        PHONE_ACTION,
        {"origin": "untrusted", "capability": "phone_action"},
        Verdict.ASK,
        "tapgate:untrusted-origin",
    ),
    ("policies:" + ALLOW_LAMP, LAMP, {"origin": "untrusted"}, Verdict.ASK, "tapgate:untrusted-origin"),
    (
        "",
        PHONE_ACTION,
        {"origin": "untrusted", "capability": "", "capability_kind": ""},
        Verdict.ASK,
        "tapgate:untrusted-origin",
    ),
    ("", THERMOMETER, {"origin": "untrusted"}, Verdict.ALLOW, "tapgate:default"),
    ("policies:" + BLOCK_LAMP, LAMP, {"origin": "untrusted"}, Verdict.BLOCK, "block-lamp"),
    ("policies:" + BLOCK_SMS, SMS, {"origin": "untrusted"}, Verdict.BLOCK, "block-sms"),
    ("profile:\n  sms_send: block\n", SMS, {"origin": "untrusted"}, Verdict.BLOCK, "profile:sms_send"),
    ("policies:" + ASK_LAMP, LAMP, {"origin": "untrusted"}, Verdict.ASK, "ask-lamp"),
    # rules are about their action
    ("policies:" + BLOCK_LAMP, LAMP, {"action": "something_else"}, Verdict.ALLOW, "tapgate:default"),
]


@pytest.mark.parametrize(("body", "base", "changes", "verdict", "rule"), DECISIONS)
def test_a_call_gets_the_strictest_of_its_rules_and_profile_entry(
    body: str, base: dict[str, Any], changes: dict[str, Any], verdict: Verdict, rule: str
) -> None:
    decision = decide(load(body), call(base, **changes))
    assert (decision.verdict, decision.rule) == (verdict, rule)
    assert decision.reason


@pytest.mark.parametrize("order", list(itertools.permutations([ALLOW_LAMP, ASK_LAMP, BLOCK_LAMP])))
def test_block_beats_ask_beats_allow_in_any_order(order: tuple[str, ...]) -> None:
    body = "policies:" + "".join(order)
    decision = decide(load(body), call())
    line = 2 + body.splitlines().index("  - name: block-lamp")
    assert decision == PolicyDecision(
        Verdict.BLOCK,
        f"No lamps tonight (rule 'block-lamp', line {line})",
        "block-lamp",
        line,
        "No lamps tonight",
    )


def test_a_block_says_the_rules_message_or_names_the_rule_with_its_line() -> None:
    lamp = decide(load("policies:" + BLOCK_LAMP), call())
    assert lamp.reason == "No lamps tonight (rule 'block-lamp', line 3)"
    assert (
        decide(load("policies:" + BLOCK_SMS), call(SMS)).reason
        == "the rule 'block-sms' (line 3) blocks this call"
    )


@pytest.mark.parametrize(
    ("decision", "message", "reason"),
    [
        ("block", "", "the rule 'r' (line 3) blocks this call"),
        ("require_approval", "", "the rule 'r' (line 3) asks the person first"),
        ("allow", "", "the rule 'r' (line 3) allows this call"),
        ("allow", "Fine by me", "Fine by me (rule 'r', line 3)"),
    ],
)
def test_a_rule_gives_the_reason_its_decision_or_message_says_and_names_itself_with_its_line(
    decision: str, message: str, reason: str
) -> None:
    body = f"policies:\n  - name: r\n    decision: {decision}\n"
    outcome = decide(load(body + (f"    message: {message}\n" if message else "")), call())
    assert (outcome.reason, outcome.rule, outcome.line, outcome.message) == (reason, "r", 3, message)


def test_a_rule_made_in_code_has_no_line_and_its_reason_names_none() -> None:
    assert PolicyRule("r", Verdict.ASK).outcome.reason == "the rule 'r' asks the person first"
    assert PolicyRule("r", Verdict.BLOCK, message="Not now").outcome.reason == "Not now (rule 'r')"


def test_an_ask_carries_the_rules_message() -> None:
    policies = load("policies:" + ASK_LAMP + "    message: Lamp actions need a yes\n")
    assert decide(policies, call()) == PolicyDecision(
        Verdict.ASK,
        "Lamp actions need a yes (rule 'ask-lamp', line 3)",
        "ask-lamp",
        3,
        message="Lamp actions need a yes",
    )


def test_a_policy_set_without_a_file_has_no_rules_and_the_default_profile() -> None:
    assert PolicySet() == load("")
    assert dict(PolicySet().profile) == {"sms_send": Verdict.ALLOW, "phone_action": Verdict.ALLOW}
    assert dict(DEFAULT_PROFILE) == dict(PolicySet().profile)


def test_the_files_profile_leaves_the_default_entries_it_does_not_name() -> None:
    policies = load("profile:\n  set_light: require_approval\n")
    assert dict(policies.profile) == {**DEFAULT_PROFILE, "set_light": Verdict.ASK}


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("block", "the policy profile blocks sms_send"),
        ("require_approval", "the policy profile asks the person before sms_send"),
        ("allow", "the policy profile allows sms_send"),
    ],
)
def test_a_profile_decision_says_what_the_profile_does_with_the_call(entry: str, reason: str) -> None:
    decision = decide(load(f"profile:\n  sms_send: {entry}\n"), call(SMS))
    assert (decision.rule, decision.reason) == ("profile:sms_send", reason)


def test_the_request_knows_which_calls_are_consequential() -> None:
    assert call().consequential
    assert call(SMS).consequential
    assert call(PHONE_ACTION).consequential
    assert call(PHONE_ACTION, capability="", capability_kind="").consequential
    assert not call(THERMOMETER).consequential


# --- files that are refused, by line and reason ------------------------------------------------------

BROKEN = [
    ("", 1, "the file is empty"),
    ("version: 1\npolicies: [\n", 3, "not valid YAML"),
    ("version: 1\npolicies:\n  - name: a\n   decision: block\n", 4, "not valid YAML"),
    ("version: 1\n---\nversion: 1\n", 2, "not valid YAML: but found another document"),
    ("version: 1\npolicies:\n  - name: \x01\n", 3, "not valid YAML: special characters are not allowed"),
    ("- version: 1\n", 1, "the file must be a mapping"),
    ("policies: []\n", 1, "version is missing"),
    ("version: 2\n", 1, "version must be 1"),
    ("version: '1'\n", 1, "version must be 1"),
    ("version: 1\nrules: []\n", 2, "unknown key 'rules'; keys are version, profile, policies"),
    ("version: 1\nversion: 1\n", 2, "'version' appears twice (first on line 1)"),
    ("version: 1\npolicies: {}\n", 2, "policies must be a list"),
    ("version: 1\npolicies:\n  - block\n", 3, "a rule must be a mapping"),
    ("version: 1\npolicies:\n  - decision: block\n", 3, "a rule needs a name"),
    ("version: 1\npolicies:\n  - name: ''\n    decision: block\n", 3, "name is empty"),
    ("version: 1\npolicies:\n  - name: 12\n    decision: block\n", 3, "name must be text"),
    ("version: 1\npolicies:\n  - name: tapgate:shadow\n    decision: allow\n", 3, "which tapgate keeps"),
    ("version: 1\npolicies:\n  - name: profile:x\n    decision: allow\n", 3, "which tapgate keeps"),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: block\n\n  - name: b\n    decision: block\n"
        "  - name: a\n    decision: allow\n",
        8,
        "name: 'a' is used twice (first on line 3)",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    desicion: block\n",
        4,
        "unknown key 'desicion' (did you mean 'decision'?)",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    condition: agentId equals x\n",
        3,
        "the rule 'a' needs a decision",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: ask\n",
        4,
        "'ask' is not a decision; decisions are allow, require_approval, block",
    ),
    ("version: 1\npolicies:\n  - name: a\n    decision: yes\n", 4, "'yes' is not a decision"),
    (
        "version: 1\npolicies:\n  - name: a\n    action: device-use\n    decision: block\n",
        4,
        "'device-use' is not an action; actions are device_use",
    ),
    (
        'version: 1\npolicies:\n  - name: a\n    decision: block\n    message: "a\\u202eb"\n',
        5,
        "message contains U+202E",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: block\n    message: " + "x" * 501 + "\n",
        5,
        "message is longer than 500",
    ),
    ("version: 1\nprofile:\n  sms-send: allow\n", 3, "'sms-send' is neither a capability name"),
    ("version: 1\nprofile:\n  device__Desk__x: allow\n", 3, "'device__Desk__x' is neither a capability name"),
    ("version: 1\nprofile:\n  sms_send: ask\n", 3, "profile: sms_send: 'ask' is not a decision"),
    ("version: 1\nprofile: [sms_send]\n", 2, "profile must be a mapping"),
]

CONDITION_REFUSALS = [
    (
        "devceId equals x",
        "unknown field 'devceId' (did you mean 'deviceId'?); fields are deviceId, capability, "
        "capabilityKind, tool, agentId, sessionId, sessionKind, origin",
    ),
    ("DeviceId equals x", "unknown field 'DeviceId'"),
    (
        "deviceId contains x",
        "unknown operator 'contains' after 'deviceId'; operators are equals, not equals, in, matches",
    ),
    ("deviceId not in [x]", "unknown operator 'not in'"),
    ("deviceId Equals x", "unknown operator 'Equals'"),
    ("deviceId", "the operator is missing after 'deviceId'"),
    ("deviceId equals", "a value should follow 'deviceId equals'"),
    ("deviceId matches '[a-'", "'[a-' is not a regular expression: unterminated character set"),
    ("agentId matches (", "'(' is not a regular expression"),
    ("deviceId in x, y", "'in' takes a list in brackets"),
    ("deviceId in [x, y", "the list after 'deviceId in' is not closed with ']'"),
    ("deviceId in [x,, y]", "the list after 'deviceId in' has an empty item"),
    ("deviceId in []", "the list after 'deviceId in' is empty"),
    ("deviceId in [x y]", "needs a ',' between items"),
    ("deviceId equals [x, y]", "'equals' takes one value; for a list write 'deviceId in [a, b]'"),
    ("agentId equals 'night bot", "a ' quote is never closed"),
    ("agentId equals 'night'bot", "a space should follow the closing quote"),
    ("deviceId equals x and", "a comparison is missing at the end"),
    ("deviceId equals x or", "a comparison is missing at the end"),
    ("deviceId equals x AND agentId equals y", "expected 'and' or 'or' after a comparison, found 'AND'"),
    ("deviceId equals x agentId equals y", "found 'agentId'"),
    ("   ", "it is empty; leave condition out to match every call"),
    (
        "deviceId equals desk_lamp",
        "deviceId 'desk_lamp' can never match: a deviceId is lower-case words joined by '-'",
    ),
    ("capability equals set-light", "capability 'set-light' can never match"),
    (
        "capabilityKind equals actuators",
        "capabilityKind 'actuators' can never match: a capabilityKind is sensor or actuator",
    ),
    ("sessionKind in [chat, cron]", "sessionKind 'cron' can never match"),
    ("tool not equals desk_lamp", "tool 'desk_lamp' can never match"),
]


def check_refusal(text: str, line: int, reason: str, source: str = "policies.yaml", key: str = "") -> None:
    with pytest.raises(PolicyFileError) as refused:
        parse_policies(text, source)
    assert isinstance(refused.value, ConfigurationError)
    assert str(refused.value).startswith(f"{source} line {line}: {key}")
    assert reason in str(refused.value)
    assert (refused.value.line, refused.value.source) == (line, source)


@pytest.mark.parametrize(("text", "line", "reason"), BROKEN)
def test_a_broken_file_is_refused_with_its_line_and_reason(text: str, line: int, reason: str) -> None:
    check_refusal(text, line, reason)


# The whole sentence a person reads for each file above that YAML itself could read.
WHOLE_REASONS = [
    ("", "the file is empty; it starts with 'version: 1'"),
    ("- version: 1\n", "the file must be a mapping of key: value"),
    ("policies: []\n", "version is missing; the file starts with 'version: 1'"),
    ("version: 2\n", "version must be 1"),
    ("version: '1'\n", "version must be 1"),
    ("version: 1\nrules: []\n", "the file: unknown key 'rules'; keys are version, profile, policies"),
    ("version: 1\nversion: 1\n", "the file: 'version' appears twice (first on line 1)"),
    ("version: 1\npolicies: {}\n", "policies must be a list of rules, each starting with '- name:'"),
    ("version: 1\npolicies:\n  - block\n", "a rule must be a mapping of key: value"),
    ("version: 1\npolicies:\n  - decision: block\n", "a rule needs a name"),
    ("version: 1\npolicies:\n  - name: ''\n    decision: block\n", "name is empty"),
    (
        "version: 1\npolicies:\n  - name: 12\n    decision: block\n",
        "name must be text (quote it if it looks like a number or yes/no)",
    ),
    (
        "version: 1\npolicies:\n  - name: tapgate:shadow\n    decision: allow\n",
        "name: 'tapgate:shadow' starts with tapgate:, profile:, which tapgate keeps",
    ),
    (
        "version: 1\npolicies:\n  - name: profile:x\n    decision: allow\n",
        "name: 'profile:x' starts with tapgate:, profile:, which tapgate keeps",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: block\n\n"
        "  - name: b\n    decision: block\n  - name: a\n    decision: allow\n",
        "name: 'a' is used twice (first on line 3)",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    desicion: block\n",
        "a rule: unknown key 'desicion' (did you mean 'decision'?); "
        "keys are name, action, condition, decision, message",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    condition: agentId equals x\n",
        "the rule 'a' needs a decision: allow, require_approval, block",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: ask\n",
        "decision: 'ask' is not a decision; decisions are allow, require_approval, block",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: yes\n",
        "decision: 'yes' is not a decision; decisions are allow, require_approval, block",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    action: device-use\n    decision: block\n",
        "action: 'device-use' is not an action; actions are device_use",
    ),
    (
        'version: 1\npolicies:\n  - name: a\n    decision: block\n    message: "a\\u202eb"\n',
        "message contains U+202E, a control, format or invisible character",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: block\n    message: " + "x" * 501 + "\n",
        "message is longer than 500 characters",
    ),
    (
        "version: 1\nprofile:\n  sms-send: allow\n",
        "profile: 'sms-send' is neither a capability name (sms_send) "
        "nor a tool name (device__desk_lamp__set_light, phone_action)",
    ),
    (
        "version: 1\nprofile:\n  device__Desk__x: allow\n",
        "profile: 'device__Desk__x' is neither a capability name (sms_send) "
        "nor a tool name (device__desk_lamp__set_light, phone_action)",
    ),
    (
        "version: 1\nprofile:\n  sms_send: ask\n",
        "profile: sms_send: 'ask' is not a decision; decisions are allow, require_approval, block",
    ),
    ("version: 1\nprofile: [sms_send]\n", "profile must be a mapping of key: value"),
    ("version: 1\n1: x\n", "the file: a key must be a word"),
    ("version: 1\n[version]: 1\n", "the file: a key must be a word"),
    ("version: 1\nprofile:\n  1: allow\n", "profile: a key must be a word"),
    ("version: 1\npolicies:\n  - name: a\n    yes: block\n", "a rule: a key must be a word"),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: [block]\n",
        "decision: that is not a decision; decisions are allow, require_approval, block",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    decision: !!str [block]\n",
        "decision: that is not a decision; decisions are allow, require_approval, block",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    action: 5\n    decision: block\n",
        "action must be text (quote it if it looks like a number or yes/no)",
    ),
    (
        "version: 1\npolicies:\n  - name: a\n    condition: 5\n    decision: block\n",
        "condition must be text (quote it if it looks like a number or yes/no)",
    ),
]


@pytest.mark.parametrize(("text", "reason"), WHOLE_REASONS)
def test_a_broken_file_is_refused_with_the_whole_sentence_that_says_what_to_write(
    text: str, reason: str
) -> None:
    with pytest.raises(PolicyFileError) as refused:
        parse_policies(text)
    assert refused.value.reason == reason


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("version: 1\npolicies: [\n", 3, "expected the node content, but found '<stream end>'"),
        (
            "version: 1\npolicies:\n  - name: a\n   decision: block\n",
            4,
            "expected <block end>, but found '<block mapping start>'",
        ),
        ("version: 1\n---\nversion: 1\n", 2, "but found another document"),
        ("version: 1\n*x\n", 3, "could not find expected ':'"),
        ("version: 1\npolicies:\n  - name: \x01\n", 3, "special characters are not allowed"),
        ("\n\nversion: 1\n# \x01\n", 4, "special characters are not allowed"),
        ("\x01", 1, "special characters are not allowed"),
    ],
)
def test_a_file_yaml_cannot_read_is_refused_at_the_line_with_the_problem_pyyaml_names(
    text: str, line: int, reason: str
) -> None:
    with pytest.raises(PolicyFileError) as refused:
        parse_policies(text)
    assert (refused.value.line, refused.value.reason) == (line, f"not valid YAML: {reason}")


FIELD_LIST = "deviceId, capability, capabilityKind, tool, agentId, sessionId, sessionKind, origin"
OPERATOR_LIST = "equals, not equals, in, matches"


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        ("   ", "it is empty; leave condition out to match every call"),
        (
            "deviceIdX equals x",
            f"unknown field 'deviceIdX' (did you mean 'deviceId'?); fields are {FIELD_LIST}",
        ),
        ("sizeX equals x", f"unknown field 'sizeX'; fields are {FIELD_LIST}"),
        ("deviceId eXquals x", f"unknown operator 'eXquals' after 'deviceId'; operators are {OPERATOR_LIST}"),
        ("deviceId not", f"unknown operator 'not' after 'deviceId'; operators are {OPERATOR_LIST}"),
        ("deviceId not in [x]", f"unknown operator 'not in' after 'deviceId'; operators are {OPERATOR_LIST}"),
        ("deviceId in [x,", "the list after 'deviceId in' is not closed with ']'"),
        ("deviceId in [x, y", "the list after 'deviceId in' is not closed with ']'"),
        ("deviceId in [x,, y]", "the list after 'deviceId in' has an empty item"),
        ("agentId equals 'night bot", "a ' quote is never closed"),
        ('agentId equals "night bot', 'a " quote is never closed'),
    ],
)
def test_a_broken_condition_is_refused_with_the_whole_sentence(condition: str, reason: str) -> None:
    with pytest.raises(PolicyFileError) as refused:
        one_rule(condition)
    assert refused.value.reason == f"condition: {reason}"


TOOL_64 = "device__desk_lamp__" + "x" * 45
TOOL_RULE = "device__<device>__<capability>, like device__desk_lamp__set_light, or phone_action"
CAPABILITY_RULE = "lower snake case without '__', at most 30 characters, like set_light"


@pytest.mark.parametrize(
    ("condition", "refusal"),
    [
        (f"tool equals {TOOL_64}", None),
        (f"tool equals {TOOL_64}y", f"tool '{TOOL_64}y' can never match: a tool is {TOOL_RULE}"),
        ("tool in [phone_action]", None),
        ("tool equals phone_actions", f"tool 'phone_actions' can never match: a tool is {TOOL_RULE}"),
        ("capability equals " + "s" * 30, None),
        (
            "capability equals " + "s" * 31,
            f"capability '{'s' * 31}' can never match: a capability is {CAPABILITY_RULE}",
        ),
        ("deviceId equals " + "d" * 24, None),
        (
            "deviceId equals " + "d" * 25,
            f"deviceId '{'d' * 25}' can never match: "
            "a deviceId is lower-case words joined by '-', like desk-lamp",
        ),
    ],
)
def test_a_name_in_a_condition_may_be_as_long_as_such_a_name_and_not_one_character_longer(
    condition: str, refusal: str | None
) -> None:
    if refusal is None:
        assert one_rule(condition).rules[0].condition is not None
        return
    with pytest.raises(PolicyFileError) as refused:
        one_rule(condition)
    assert refused.value.reason == f"condition: {refusal}"


@pytest.mark.parametrize(
    ("key", "loads"),
    [(TOOL_64, True), (TOOL_64 + "y", False), ("phone_action", True), ("s" * 30, True), ("s" * 31, False)],
)
def test_a_profile_key_may_be_as_long_as_a_tool_or_capability_name_and_not_one_character_longer(
    key: str, loads: bool
) -> None:
    text = f"version: 1\nprofile:\n  {key}: block\n"
    if loads:
        assert parse_policies(text).profile[key] is Verdict.BLOCK
        return
    with pytest.raises(PolicyFileError) as refused:
        parse_policies(text)
    assert refused.value.reason == (
        f"profile: {key!r} is neither a capability name (sms_send) "
        "nor a tool name (device__desk_lamp__set_light, phone_action)"
    )


@pytest.mark.parametrize(("key", "limit"), [("name", 80), ("message", 500)])
def test_a_rules_name_and_message_may_be_as_long_as_their_limit_and_not_one_character_longer(
    key: str, limit: int
) -> None:
    rule = {"name": "r", "decision": "block", key: "n" * limit}
    assert getattr(policy_file([rule]).rules[0], key) == "n" * limit
    with pytest.raises(PolicyFileError) as refused:
        policy_file([{**rule, key: "n" * (limit + 1)}])
    assert refused.value.reason == f"{key} is longer than {limit} characters"


@pytest.mark.parametrize(("condition", "reason"), CONDITION_REFUSALS)
def test_a_broken_condition_is_refused_with_its_line_and_reason(condition: str, reason: str) -> None:
    text = (
        "version: 1\npolicies:\n  - name: fine\n    decision: allow\n  - name: broken\n    decision: block\n"
    )
    text += f"    condition: {yaml.safe_dump(condition).splitlines()[0]}\n"
    check_refusal(text, 7, reason, key="condition: ")


def test_the_refusal_names_the_file_it_came_from() -> None:
    check_refusal("version: 3\n", 1, "version must be 1", source="/etc/tapgate/policies.yaml")


def test_a_condition_in_a_block_scalar_is_refused_at_its_first_line() -> None:
    text = "version: 1\npolicies:\n  - name: a\n    decision: block\n"
    text += "    condition: >\n      deviceId\n      equal x\n"
    check_refusal(text, 5, "unknown operator 'equal'")


# --- properties ---------------------------------------------------------------------------------------

POOLS: dict[str, list[str]] = {
    "deviceId": ["desk-lamp", "phone"],
    "capability": ["set_light", "sms_send", "read_temp"],
    "capabilityKind": ["sensor", "actuator"],
    "tool": ["device__desk_lamp__set_light", "device__phone__sms_send", "phone_action"],
    "agentId": ["claude", "night bot"],
    "sessionId": ["s-1", "s-2"],
    "sessionKind": ["chat", "triage"],
    "origin": ["owner", "untrusted"],
}


@st.composite
def comparisons(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(list(POOLS)))
    operator = draw(st.sampled_from(list(Operator)))
    values = draw(st.lists(st.sampled_from(POOLS[name]), min_size=1, max_size=3))
    if operator is Operator.IN:
        return f"{name} in [{', '.join(repr(v) for v in values)}]"
    if operator is Operator.MATCHES:
        return f"{name} matches '{re.escape(values[0][:3])}.*'"
    return f"{name} {operator.value} '{values[0]}'"


conditions = st.lists(
    st.lists(comparisons(), min_size=1, max_size=3).map(" and ".join), min_size=1, max_size=3
).map(" or ".join)
decisions = st.sampled_from(["allow", "require_approval", "block"])
rules = st.fixed_dictionaries({"condition": conditions, "decision": decisions})
profiles = st.dictionaries(
    st.sampled_from(["sms_send", "set_light", "phone_action", "device__phone__sms_send"]), decisions
)
requests = st.builds(
    PolicyRequest,
    tool=st.sampled_from(POOLS["tool"]),
    device_id=st.sampled_from(POOLS["deviceId"]),
    capability=st.sampled_from([*POOLS["capability"], "phone_actions"]),
    capability_kind=st.sampled_from(POOLS["capabilityKind"]),
    agent_id=st.sampled_from(POOLS["agentId"]),
    session_id=st.sampled_from(POOLS["sessionId"]),
    session_kind=st.sampled_from(POOLS["sessionKind"]),
    origin=st.sampled_from(POOLS["origin"]),
    shadow=st.booleans(),
)


def policy_file(rule_list: list[dict[str, str]], profile: dict[str, str] | None = None) -> PolicySet:
    named = [{"name": f"rule-{i}", **rule} for i, rule in enumerate(rule_list)]
    return parse_policies(yaml.safe_dump({"version": 1, "profile": profile or {}, "policies": named}))


@settings(deadline=None)  # each example parses a policies file twice; a loaded CI box takes over 200 ms
@given(st.lists(rules, max_size=6), rules, st.integers(min_value=0), profiles, requests)
def test_adding_a_rule_never_makes_a_decision_less_strict(
    rule_list: list[dict[str, str]],
    extra: dict[str, str],
    at: int,
    profile: dict[str, str],
    the_call: PolicyRequest,
) -> None:
    before = decide(policy_file(rule_list, profile), the_call)
    rule_list.insert(at % (len(rule_list) + 1), extra)
    after = decide(policy_file(rule_list, profile), the_call)
    assert STRICTNESS[after.verdict] >= STRICTNESS[before.verdict]


@given(st.lists(rules, min_size=1, max_size=6), profiles, requests)
def test_the_verdict_is_the_strictest_of_the_profile_entry_and_each_rule_alone(
    rule_list: list[dict[str, str]], profile: dict[str, str], the_call: PolicyRequest
) -> None:
    alone = [decide(policy_file([rule], profile), the_call).verdict for rule in rule_list]
    assert decide(policy_file(rule_list, profile), the_call).verdict == max(alone, key=STRICTNESS.__getitem__)


RICH = load("""
    profile:
      set_light: require_approval
    policies:
      - name: a
        condition: "agentId matches '.*bot' and origin in [untrusted, '']"
        decision: block
      - name: b
        condition: "deviceId not equals desk-lamp or tool equals phone_action"
        decision: require_approval
      - name: c
        decision: allow
""")


@given(
    st.builds(
        PolicyRequest,
        tool=st.text(),
        device_id=st.text(),
        capability=st.text(),
        capability_kind=st.text(),
        agent_id=st.text(),
        session_id=st.text(),
        session_kind=st.text(),
        origin=st.text() | st.just("untrusted"),
        action=st.text() | st.just("device_use"),
        shadow=st.booleans(),
    )
)
def test_decide_answers_any_request_with_a_verdict_and_a_reason(the_call: PolicyRequest) -> None:
    decision = decide(RICH, the_call)
    assert decision.verdict in Verdict and decision.reason and decision.rule
    if the_call.shadow:
        assert decision.verdict is Verdict.BLOCK


def loads_or_is_refused_with_a_line(text: str) -> bool:
    try:
        parse_policies(text)
    except PolicyFileError as refused:
        return re.fullmatch(r"policies\.yaml line [1-9]\d*: .+", str(refused), re.DOTALL) is not None
    return True


@given(st.text(max_size=200))
def test_any_text_either_loads_or_is_refused_with_a_line(text: str) -> None:
    assert loads_or_is_refused_with_a_line(text)


@given(st.text(max_size=80) | conditions.map(lambda c: c.replace("'", "").replace(" ", "  ")))
def test_any_condition_either_loads_or_is_refused_with_its_line(condition: str) -> None:
    text = yaml.safe_dump(
        {"version": 1, "policies": [{"name": "r", "decision": "block", "condition": condition}]}
    )
    assert loads_or_is_refused_with_a_line(text)


def test_checking_a_file_keeps_the_rules_that_parse_and_reports_every_broken_one_by_line() -> None:
    text = textwrap.dedent(
        """\
        version: 1
        policies:
          - name: texts-ask
            condition: capability equals "sms_send"
            decision: require_approval
          - decision: block
          - name: ''
            decision: block
        """
    )
    rules, problems = parse_policies_reporting(text, "mine.yaml")
    assert [rule.name for rule in rules.rules] == ["texts-ask"]
    assert [(p.source, p.line, p.reason) for p in problems] == [
        ("mine.yaml", 6, "a rule needs a name"),
        ("mine.yaml", 7, "name is empty"),
    ]
    assert parse_policies_reporting(text)[1][0].source == "policies.yaml"
