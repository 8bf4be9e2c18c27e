"""A mandate's bounds at their edges: what an asked-for mandate may ask (each count and length at its limit
is taken, one past it refused, naming the field and saying why), what each constraint holds on, and which
calls a live mandate covers."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from tapgate.domain.approvals import canonical_json
from tapgate.domain.devices import Capability, CapabilityKind, Param, ParamType
from tapgate.domain.errors import BoundsRefused
from tapgate.domain.mandates import (
    Bounds,
    MandateStatus,
    canonical,
    canonical_bytes,
    check_bounds,
    covers,
    first_covering,
    holds,
)
from tests.test_mandates_domain import FAMILY, LAMP_TOOL, NOW, SMS, SMS_TOOL, TOOLS, _body, _mandate

DIAL_TOOL = "device__hall__dial"
DIAL = Capability(
    "dial",
    CapabilityKind.ACTUATOR,
    "A dial whose parameters share names with the lamp's and the phone's, with other types",
    (
        Param("to", ParamType.INTEGER),
        Param("level", ParamType.NUMBER),
        Param("mode", ParamType.ENUM, enum=("heat", "cool")),
        Param("on", ParamType.BOOLEAN),
    ),
)
RADIO_TOOL = "device__kitchen__radio"
RADIO = Capability("play", CapabilityKind.ACTUATOR, "Radio", (Param("mode", ParamType.STRING),))
ALL = {**TOOLS, DIAL_TOOL: DIAL, RADIO_TOOL: RADIO}
ON_PHONE, ON_LAMP, ON_DIAL, ON_RADIO = [SMS_TOOL], [LAMP_TOOL], [DIAL_TOOL], [RADIO_TOOL]
PHONES = {f"device__phone_{i:02}__sms_send": SMS for i in range(17)}  # 17 phones that each send texts
OK = {"to": FAMILY[0], "body": "home at 6"}


def _refused(body: dict[str, Any], tools: dict[str, Capability] = ALL) -> tuple[str, str]:
    with pytest.raises(BoundsRefused) as refused:
        check_bounds(body, tools, "claude")
    return refused.value.field, refused.value.message


def test_every_field_a_mandate_has_is_taken_and_its_purpose_kept_without_surrounding_spaces() -> None:
    body = _body(agent_id=None, purpose="  texts to Mum and Dad ")
    assert check_bounds(body, ALL, "claude") == Bounds(
        agent_id="claude",
        tools=(SMS_TOOL,),
        constraints={"to": {"one_of": FAMILY}, "body": {"max_length": 160}},
        max_calls=40,
        per_day=5,
        expires_in_seconds=7 * 86400,
        purpose="texts to Mum and Dad",
    )


@pytest.mark.parametrize("constraints", [None, {}, "absent"])
def test_a_mandate_without_constraints_or_a_daily_limit_bounds_no_value_and_no_day(constraints: Any) -> None:
    body = _body(constraints=constraints)
    del body["per_day"]
    if constraints == "absent":
        del body["constraints"]
    bounds = check_bounds(body, ALL, None)
    assert (bounds.agent_id, bounds.constraints, bounds.per_day) == (None, {}, None)


@pytest.mark.parametrize(
    ("changes", "field", "value"),
    [
        ({"tools": [SMS_TOOL]}, "tools", (SMS_TOOL,)),
        ({"tools": list(PHONES)[:16]}, "tools", tuple(PHONES)[:16]),
        ({"max_calls": 1, "per_day": None}, "max_calls", 1),
        ({"max_calls": 1000}, "max_calls", 1000),
        ({"per_day": 1}, "per_day", 1),
        ({"per_day": 40}, "per_day", 40),  # as many a day as in all
        ({"expires_in_seconds": 60}, "expires_in_seconds", 60),
        ({"expires_in_seconds": 30 * 86400}, "expires_in_seconds", 30 * 86400),
        ({"purpose": "x" * 200}, "purpose", "x" * 200),
        ({"purpose": "x"}, "purpose", "x"),
    ],
)
def test_each_count_window_and_length_is_taken_at_its_limit(
    changes: dict[str, Any], field: str, value: Any
) -> None:
    bounds = check_bounds(_body(**changes), {**ALL, **PHONES}, "claude")
    assert getattr(bounds, field) == value


ONE_TO_16_TOOLS = "tools must be a list of 1 to 16 tool names."
ONE_TO_1000_CALLS = "max_calls must be a whole number from 1 to 1000."
ONE_TO_40_A_DAY = "per_day must be a whole number from 1 to 40."
A_MINUTE_TO_30_DAYS = "expires_in_seconds must be a whole number from 60 to 2592000."
A_PURPOSE = "purpose must be text of 1 to 200 characters: why."


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"budget": 5}, "budget", "budget is not a field of a mandate."),
        ({"tools": SMS_TOOL}, "tools", ONE_TO_16_TOOLS),
        ({"tools": []}, "tools", ONE_TO_16_TOOLS),
        ({"tools": list(PHONES)}, "tools", ONE_TO_16_TOOLS),
        ({"tools": [SMS_TOOL, SMS_TOOL]}, "tools", "tools names a tool twice."),
        (
            {"tools": ["device__" + "x" * 100]},
            "tools",
            f"unknown tool: {'device__' + 'x' * 72!r} is not one of this person's tools.",
        ),
        ({"tools": [["a"]]}, "tools", "unknown tool: \"['a']\" is not one of this person's tools."),
        ({"constraints": ["to"]}, "constraints", "constraints must be an object of parameter: constraint."),
        ({"max_calls": 0}, "max_calls", ONE_TO_1000_CALLS),
        ({"max_calls": 1001}, "max_calls", ONE_TO_1000_CALLS),
        ({"max_calls": True}, "max_calls", ONE_TO_1000_CALLS),
        ({"max_calls": 40.0}, "max_calls", ONE_TO_1000_CALLS),
        ({"max_calls": None}, "max_calls", ONE_TO_1000_CALLS),
        ({"per_day": 0}, "per_day", ONE_TO_40_A_DAY),
        ({"per_day": 41}, "per_day", ONE_TO_40_A_DAY),  # more a day than in all
        ({"per_day": True}, "per_day", ONE_TO_40_A_DAY),
        ({"expires_in_seconds": 59}, "expires_in_seconds", A_MINUTE_TO_30_DAYS),
        ({"expires_in_seconds": 30 * 86400 + 1}, "expires_in_seconds", A_MINUTE_TO_30_DAYS),
        ({"purpose": ""}, "purpose", A_PURPOSE),
        ({"purpose": " \n "}, "purpose", A_PURPOSE),
        ({"purpose": "x" * 201}, "purpose", A_PURPOSE),
        ({"purpose": 5}, "purpose", A_PURPOSE),
        ({"purpose": None}, "purpose", A_PURPOSE),
    ],
)
def test_an_asked_for_mandate_one_past_a_limit_is_refused_naming_its_field(
    changes: dict[str, Any], field: str, message: str
) -> None:
    assert _refused(_body(**changes), {**ALL, **PHONES}) == (field, message)


@pytest.mark.parametrize(
    ("tools", "param", "spec"),
    [
        (ON_PHONE, "body", {"equals": "x" * 1000}),
        (ON_PHONE, "to", {"one_of": ["+447700900001"]}),
        (ON_PHONE, "to", {"one_of": [f"+4477009000{i:02}" for i in range(50)]}),
        (ON_PHONE, "to", {"matches": "^\\+44"}),
        (ON_PHONE, "body", {"max_length": 0}),
        (ON_PHONE, "body", {"max_length": 10_000}),
        (ON_DIAL, "mode", {"equals": "heat"}),
        (ON_DIAL, "mode", {"matches": "^h"}),
        (ON_DIAL, "mode", {"max_length": 4}),
        (ON_DIAL + ON_RADIO, "mode", {"equals": "heat"}),  # a choice in one tool, free text in the other
        (ON_DIAL + ON_RADIO, "mode", {"one_of": ["heat", "cool"]}),
        (ON_DIAL + ON_RADIO, "mode", {"matches": "^h"}),
        (ON_DIAL + ON_RADIO, "mode", {"max_length": 4}),
        (ON_LAMP, "on", {"equals": False}),
        (ON_LAMP, "level", {"equals": 3}),
        (ON_LAMP, "level", {"max": 50}),
        (ON_DIAL, "level", {"equals": 2.5}),
        (ON_DIAL, "level", {"max": -2.5}),
        (ON_LAMP + ON_DIAL, "level", {"equals": 3}),
        (ON_LAMP + ON_DIAL, "level", {"one_of": [1, 2.5]}),
        (ON_LAMP + ON_DIAL, "level", {"max": 50}),
        (ON_LAMP + ON_DIAL, "on", {"one_of": [True]}),
    ],
)
def test_a_constraint_that_fits_its_parameter_in_every_tool_is_kept_as_asked(
    tools: list[str], param: str, spec: dict[str, Any]
) -> None:
    body = _body(tools=tools, constraints={param: spec})
    assert check_bounds(body, ALL, "claude").constraints == {param: spec}


NOT_AN_OPERATOR = "the constraint on 'to' must be one of {equals, one_of, matches, max, max_length}."
NOT_A_LENGTH = "max_length on 'body' must be a whole number from 0 to 10000."


@pytest.mark.parametrize(
    ("tools", "param", "spec", "message"),
    [
        (
            ON_PHONE,
            "colour",
            {"equals": "red"},
            "'colour' is not a parameter of sms_send: every tool must declare it.",
        ),
        (
            ON_PHONE + ON_LAMP,
            "to",
            {"equals": "x"},
            "'to' is not a parameter of set_light: every tool must declare it.",
        ),
        (ON_PHONE, "to", "+447700900001", NOT_AN_OPERATOR),
        (ON_PHONE, "to", {}, NOT_AN_OPERATOR),
        (ON_PHONE, "to", {"equals": "+447700900001", "max_length": 13}, NOT_AN_OPERATOR),
        (ON_PHONE, "to", {"between": [1, 2]}, NOT_AN_OPERATOR),
        # equals and one_of: a value of the parameter's type in every tool
        (ON_PHONE, "body", {"equals": "x" * 1001}, "equals does not fit the string parameter 'body'."),
        (ON_PHONE, "to", {"equals": 7}, "equals does not fit the string parameter 'to'."),
        (ON_DIAL, "mode", {"equals": 1}, "equals does not fit the enum parameter 'mode'."),
        (ON_LAMP, "on", {"equals": 1}, "equals does not fit the boolean parameter 'on'."),
        (ON_LAMP, "level", {"equals": 1.5}, "equals does not fit the integer parameter 'level'."),
        (ON_LAMP, "level", {"equals": True}, "equals does not fit the integer parameter 'level'."),
        (ON_DIAL, "level", {"equals": True}, "equals does not fit the number parameter 'level'."),
        (ON_DIAL, "level", {"equals": "1"}, "equals does not fit the number parameter 'level'."),
        (ON_DIAL, "level", {"equals": math.inf}, "equals does not fit the number parameter 'level'."),
        (ON_DIAL, "level", {"equals": math.nan}, "equals does not fit the number parameter 'level'."),
        (
            ON_LAMP + ON_DIAL,
            "level",
            {"equals": "1"},
            "equals does not fit the integer/number parameter 'level'.",
        ),
        (
            ON_PHONE + ON_DIAL,
            "to",
            {"equals": "+44"},
            "equals does not fit the integer/string parameter 'to'.",
        ),
        (ON_PHONE + ON_DIAL, "to", {"equals": 7}, "equals does not fit the integer/string parameter 'to'."),
        (ON_DIAL + ON_RADIO, "mode", {"equals": 7}, "equals does not fit the enum/string parameter 'mode'."),
        (ON_PHONE, "to", {"one_of": "+447700900001"}, "one_of on 'to' must list 1 to 50 values."),
        (ON_PHONE, "to", {"one_of": []}, "one_of on 'to' must list 1 to 50 values."),
        (ON_PHONE, "to", {"one_of": ["+44"] * 51}, "one_of on 'to' must list 1 to 50 values."),
        (ON_PHONE, "to", {"one_of": ["+44", 7]}, "one_of does not fit the string parameter 'to'."),
        # matches and max_length: a text parameter in every tool
        (ON_LAMP, "level", {"matches": "1"}, "matches does not fit the integer parameter 'level'."),
        (
            ON_PHONE + ON_DIAL,
            "to",
            {"matches": "1"},
            "matches does not fit the integer/string parameter 'to'.",
        ),
        (ON_PHONE, "to", {"matches": "4" * 201}, "matches on 'to' is over 200 characters."),
        (ON_LAMP, "on", {"max_length": 3}, "max_length does not fit the boolean parameter 'on'."),
        (
            ON_PHONE + ON_DIAL,
            "to",
            {"max_length": 3},
            "max_length does not fit the integer/string parameter 'to'.",
        ),
        (ON_PHONE, "body", {"max_length": -1}, NOT_A_LENGTH),
        (ON_PHONE, "body", {"max_length": 10_001}, NOT_A_LENGTH),
        (ON_PHONE, "body", {"max_length": 160.0}, NOT_A_LENGTH),
        (ON_PHONE, "body", {"max_length": True}, NOT_A_LENGTH),
        # max: a finite number, on a number parameter in every tool
        (ON_PHONE, "to", {"max": 3}, "max does not fit the string parameter 'to'."),
        (ON_LAMP, "on", {"max": 1}, "max does not fit the boolean parameter 'on'."),
        (ON_PHONE + ON_DIAL, "to", {"max": 3}, "max does not fit the integer/string parameter 'to'."),
        (ON_LAMP, "level", {"max": True}, "max does not fit the integer parameter 'level'."),
        (ON_LAMP, "level", {"max": "50"}, "max does not fit the integer parameter 'level'."),
        (ON_DIAL, "level", {"max": math.inf}, "max on 'level' must be a finite number."),
        (ON_DIAL, "level", {"max": -math.inf}, "max on 'level' must be a finite number."),
        (ON_DIAL, "level", {"max": math.nan}, "max on 'level' must be a finite number."),
    ],
)
def test_a_constraint_that_does_not_fit_is_refused_saying_which_parameter_and_why(
    tools: list[str], param: str, spec: Any, message: str
) -> None:
    assert _refused(_body(tools=tools, constraints={param: spec})) == ("constraints", message)


@pytest.mark.parametrize(
    ("spec", "value", "held"),
    [
        ({"equals": "+447700900001"}, "+447700900001", True),
        ({"equals": "+447700900001"}, "+447700900002", False),
        ({"equals": 3}, 3, True),
        ({"equals": 3}, 3.0, True),  # the same number, written as JSON may write it
        ({"equals": 2.5}, 2.5, True),
        ({"equals": 3}, 4, False),
        ({"equals": 3}, "3", False),
        ({"equals": 1}, True, False),  # a yes is not the number one
        ({"equals": True}, 1, False),
        ({"equals": True}, True, True),
        ({"equals": False}, True, False),
        ({"one_of": FAMILY}, FAMILY[1], True),
        ({"one_of": FAMILY}, "+447700900009", False),
        ({"one_of": [1, 2.5]}, 1.0, True),
        ({"one_of": [1, 2.5]}, 2.5, True),
        ({"one_of": [1, 2.5]}, True, False),
        ({"one_of": [True]}, 1, False),
        ({"one_of": ["1"]}, 1, False),
        ({"matches": "^\\+44"}, "+447700900001", True),
        ({"matches": "0001"}, "+447700900001", True),  # searched anywhere in the value
        ({"matches": "^\\+44"}, "+337700900001", False),
        ({"matches": "a"}, "a" * 1000, True),
        ({"matches": "a"}, "a" * 1001, False),  # too long to try: the person is asked
        ({"matches": "1"}, 1, False),
        ({"max": 50}, 50, True),
        ({"max": 50}, 51, False),
        ({"max": 50}, 50.5, False),
        ({"max": 2.5}, 2.5, True),
        ({"max": 50}, -3, True),
        ({"max": 50}, True, False),
        ({"max": 50}, "5", False),
        ({"max_length": 3}, "abc", True),
        ({"max_length": 3}, "abcd", False),
        ({"max_length": 0}, "", True),
        ({"max_length": 3}, 1, False),
        ({"max_length": 3}, ["a"], False),
    ],
)
def test_a_constraint_holds_on_an_argument_exactly_up_to_its_bound(
    spec: dict[str, Any], value: object, held: bool
) -> None:
    assert holds(spec, True, value) is held


@pytest.mark.parametrize(
    "spec", [{"equals": None}, {"max_length": 3}, {"max": 50}, {"matches": ""}, {"one_of": [None]}]
)
def test_a_constraint_never_holds_on_an_absent_argument(spec: dict[str, Any]) -> None:
    assert holds(spec, False, None) is False


@pytest.mark.parametrize(("used_today", "covered"), [(4, True), (5, False), (6, False)])
def test_a_mandate_covers_calls_until_its_daily_count_is_spent(used_today: int, covered: bool) -> None:
    mandate = _mandate(used=used_today, used_today=used_today, day=NOW.date().isoformat())
    assert covers(mandate, "claude", SMS_TOOL, OK, NOW) is covered


@pytest.mark.parametrize(("used", "covered"), [(39, True), (40, False)])
def test_a_mandate_covers_calls_until_its_count_in_all_is_spent(used: int, covered: bool) -> None:
    mandate = _mandate(used=used, per_day=None)
    assert covers(mandate, "claude", SMS_TOOL, OK, NOW) is covered


def test_a_mandate_covers_calls_until_the_moment_it_ends() -> None:
    mandate = _mandate()
    assert covers(mandate, "claude", SMS_TOOL, OK, mandate.expires_at - timedelta(microseconds=1))
    assert not covers(mandate, "claude", SMS_TOOL, OK, mandate.expires_at)


def test_a_mandate_for_several_tools_covers_each_when_every_constraint_holds() -> None:
    mandate = _mandate(tools=(SMS_TOOL, DIAL_TOOL), constraints={"to": {"one_of": FAMILY}})
    assert covers(mandate, "claude", SMS_TOOL, {"to": FAMILY[0]}, NOW)
    assert covers(mandate, "claude", DIAL_TOOL, {"to": FAMILY[1], "level": 3}, NOW)
    assert not covers(mandate, "claude", LAMP_TOOL, {"to": FAMILY[1]}, NOW)
    assert not covers(mandate, "claude", DIAL_TOOL, {"level": 3}, NOW)
    assert covers(_mandate(constraints={}), "claude", SMS_TOOL, {}, NOW)  # no constraint: any values


def test_of_the_mandates_covering_a_call_the_first_to_end_comes_first_and_a_tie_goes_by_id() -> None:
    ending = NOW + timedelta(days=2)
    mandates = [
        _mandate(mandate_id="mnd_c"),
        _mandate(mandate_id="mnd_b", expires_at=ending),
        _mandate(mandate_id="mnd_a", expires_at=ending),
        _mandate(mandate_id="mnd_revoked", status=MandateStatus.REVOKED, expires_at=NOW + timedelta(days=1)),
        _mandate(mandate_id="mnd_other", agent_id="other-agent", expires_at=NOW + timedelta(days=1)),
    ]
    covering = list(first_covering(mandates, "claude", SMS_TOOL, OK, NOW))
    assert [m.mandate_id for m in covering] == ["mnd_a", "mnd_b", "mnd_c"]
    assert list(first_covering(mandates, "claude", SMS_TOOL, {**OK, "body": "x" * 161}, NOW)) == []


def test_the_signed_bytes_are_the_mandates_canonical_json_word_for_word() -> None:
    mandate = _mandate()
    expires = int((NOW + timedelta(days=7)).timestamp())
    assert (
        canonical_bytes(mandate)
        == (
            '{"agent_id":"claude","constraints":{"body":{"max_length":160},"to":{"one_of":["+447700900001",'
            '"+447700900002"]}},"expires_at":' + str(expires) + ',"mandate_id":"mnd_1","max_calls":40,'
            '"per_day":5,"purpose":"texts to Mum and Dad","tools":["device__ana_phone__sms_send"],'
            '"user_id":"ana"}'
        ).encode()
    )
    assert canonical_bytes(mandate) == canonical_json(canonical(mandate))
