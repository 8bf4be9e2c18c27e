"""Standing mandates in the domain: every reason an asked-for mandate is refused, the card that states
every bound, the hash that covers them, and which calls a live mandate covers."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapgate.domain.approvals import canonical_json
from tapgate.domain.devices import Capability, CapabilityKind, Param, ParamType
from tapgate.domain.errors import Conflict, InvalidInput
from tapgate.domain.mandates import (
    Mandate,
    MandateStatus,
    canonical,
    check_bounds,
    compile_pattern,
    covers,
    first_covering,
    preview,
)

NOW = datetime(2026, 12, 4, 23, 30, tzinfo=UTC)
SMS_TOOL = "device__ana_phone__sms_send"
LAMP_TOOL = "device__desk_lamp__set_light"
SMS = Capability(
    "sms_send",
    CapabilityKind.ACTUATOR,
    "Send a text",
    (Param("to", ParamType.STRING, True), Param("body", ParamType.STRING, True)),
)
LAMP = Capability(
    "set_light",
    CapabilityKind.ACTUATOR,
    "Lamp",
    (Param("on", ParamType.BOOLEAN, True), Param("level", ParamType.INTEGER)),
    confirm=True,
)
TOOLS = {SMS_TOOL: SMS, LAMP_TOOL: LAMP}
SHOWN = {SMS_TOOL: ("Ana's phone", SMS), LAMP_TOOL: ("Desk lamp", LAMP)}
FAMILY = ["+447700900001", "+447700900002"]


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "tools": [SMS_TOOL],
        "constraints": {"to": {"one_of": FAMILY}, "body": {"max_length": 160}},
        "max_calls": 40,
        "per_day": 5,
        "expires_in_seconds": 7 * 86400,
        "purpose": "texts to Mum and Dad",
    }
    body.update(changes)
    return body


def _mandate(**changes: Any) -> Mandate:
    bounds = check_bounds(_body(), TOOLS, "claude")
    mandate = Mandate(
        tenant_id="t",
        mandate_id="mnd_1",
        user_id="ana",
        agent_id=bounds.agent_id,
        tools=bounds.tools,
        constraints=bounds.constraints,
        max_calls=bounds.max_calls,
        per_day=bounds.per_day,
        purpose=bounds.purpose,
        created_at=NOW,
        expires_at=NOW + timedelta(seconds=bounds.expires_in_seconds),
        sign_until=NOW + timedelta(minutes=5),
        status=MandateStatus.ACTIVE,
    )
    return replace(mandate, **changes)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"tools": ["device__ana_phone__sms_sendx"]}, "unknown tool"),
        ({"tools": []}, "tools must be a list of 1 to 16"),
        ({"tools": [SMS_TOOL, SMS_TOOL]}, "names a tool twice"),
        ({"constraints": {"colour": {"equals": "red"}}}, "'colour' is not a parameter of sms_send"),
        ({"tools": [SMS_TOOL, LAMP_TOOL]}, "is not a parameter of set_light"),
        ({"constraints": {"to": {"max": 3}}}, "max does not fit the string parameter 'to'"),
        ({"constraints": {"to": {"equals": 7}}}, "equals does not fit"),
        ({"constraints": {"to": {"between": [1, 2]}}}, "must be one of"),
        ({"constraints": {"to": {"one_of": ["x"] * 51}}}, "1 to 50 values"),
        ({"constraints": {"to": {"matches": "("}}}, "does not compile"),
        ({"constraints": {"to": {"matches": "a" * 201}}}, "over 200 characters"),
        ({"constraints": {"to": {"matches": "(a+)+$"}}}, "a repeated group may not itself repeat"),
        ({"constraints": {"to": {"matches": "(a)\\1"}}}, "backreferences"),
        ({"constraints": {"to": {"matches": ".*.*x"}}}, "at most one repetition may be unbounded"),
        ({"constraints": {"to": {"matches": ".{0,10}.{0,10}x"}}}, "too many ways to match"),
        ({"expires_in_seconds": 30 * 86400 + 1}, "expires_in_seconds must be a whole number from 60"),
        ({"expires_in_seconds": 59}, "expires_in_seconds"),
        ({"max_calls": 0}, "max_calls must be a whole number from 1 to 1000"),
        ({"max_calls": 1001}, "max_calls"),
        ({"max_calls": True}, "max_calls"),
        ({"per_day": 41}, "per_day must be a whole number from 1 to 40"),
        ({"purpose": ""}, "purpose"),
        ({"purpose": "x" * 201}, "purpose"),
        ({"budget": 5}, "budget is not a field of a mandate"),
    ],
)
def test_an_asked_for_mandate_out_of_bounds_is_refused_with_its_reason(
    changes: dict[str, Any], reason: str
) -> None:
    with pytest.raises(InvalidInput, match=re.escape(reason)):
        check_bounds(_body(**changes), TOOLS, "claude")


def test_a_lamp_mandate_takes_constraints_that_fit_its_parameters() -> None:
    bounds = check_bounds(
        _body(tools=[LAMP_TOOL], constraints={"on": {"equals": True}, "level": {"max": 50}}), TOOLS, None
    )
    assert bounds.agent_id is None and bounds.constraints == {"on": {"equals": True}, "level": {"max": 50}}
    with pytest.raises(InvalidInput, match="max_length does not fit"):
        check_bounds(_body(tools=[LAMP_TOOL], constraints={"on": {"max_length": 3}}), TOOLS, None)


def test_the_card_states_every_bound_in_plain_words() -> None:
    card = preview(_mandate(), SHOWN, "Claude on the laptop")
    text = " ".join(f["value"] for f in card["fields"])
    assert card["kind"] == "mandate"
    assert {"label": "Agent", "value": "Claude on the laptop"} in card["fields"]
    for words in (
        "Claude on the laptop may send SMS on Ana's phone",
        "to one of '+447700900001', '+447700900002'",
        "body at most 160 characters long",
        "at most 5 a day and 40 in all",
        "until 11 Dec 2026 23:30 UTC",
        "purpose: texts to Mum and Dad",
    ):
        assert words in text


def test_the_card_reads_every_bound_word_for_word() -> None:
    summary = (
        "Claude may send SMS on Ana's phone with to one of '+447700900001', '+447700900002'; body at most "
        "160 characters long, at most 5 a day and 40 in all, until 11 Dec 2026 23:30 UTC, without asking "
        "you each time — purpose: texts to Mum and Dad"
    )
    assert preview(_mandate(), SHOWN) == {
        "kind": "mandate",
        "fields": [
            {"label": "Mandate", "value": summary},
            {"label": "Agent", "value": "claude"},
            {"label": "Tools", "value": "send SMS on Ana's phone (device__ana_phone__sms_send)"},
            {
                "label": "Values",
                "value": "to one of '+447700900001', '+447700900002'; body at most 160 characters long",
            },
            {"label": "Calls in all", "value": "40"},
            {"label": "Calls a day", "value": "5"},
            {"label": "Until", "value": "11 Dec 2026 23:30 UTC"},
            {"label": "Purpose", "value": "texts to Mum and Dad"},
        ],
    }


def test_the_card_words_each_kind_of_bound_and_says_when_there_is_none() -> None:
    constraints = {
        "on": {"equals": True},
        "level": {"max": 50},
        "to": {"matches": "^\\+44"},
        "body": {"equals": "hi"},
        "code": {"one_of": [1, "a"]},
    }
    mandate = _mandate(agent_id=None, per_day=None, tools=(LAMP_TOOL, SMS_TOOL), constraints=constraints)
    fields = {f["label"]: f["value"] for f in preview(mandate, SHOWN)["fields"]}
    assert fields["Mandate"].startswith(
        "Any of your agents may use set_light on Desk lamp and send SMS on Ana's phone with on exactly True; "
    )
    assert ", at most 40 in all, until " in fields["Mandate"]
    assert fields["Agent"] == "any of your agents"
    assert fields["Tools"] == (
        "use set_light on Desk lamp (device__desk_lamp__set_light); "
        "send SMS on Ana's phone (device__ana_phone__sms_send)"
    )
    assert fields["Values"] == (
        "on exactly True; level at most 50; to matching the pattern ^\\+44; body exactly 'hi'; "
        "code one of 1, 'a'"
    )
    assert fields["Calls a day"] == "no daily limit"
    unbound = {f["label"]: f["value"] for f in preview(_mandate(constraints={}), SHOWN)["fields"]}
    assert unbound["Values"] == "any values"
    assert " with " not in unbound["Mandate"]


def test_the_signed_content_names_every_bound_as_a_phone_rebuilds_it() -> None:
    assert canonical(_mandate()) == {
        "mandate_id": "mnd_1",
        "user_id": "ana",
        "agent_id": "claude",
        "tools": ["device__ana_phone__sms_send"],
        "constraints": {"to": {"one_of": FAMILY}, "body": {"max_length": 160}},
        "max_calls": 40,
        "per_day": 5,
        "expires_at": int((NOW + timedelta(days=7)).timestamp()),
        "purpose": "texts to Mum and Dad",
    }


def test_the_signed_hash_covers_every_bound() -> None:
    base = canonical_json(canonical(_mandate()))
    for changes in (
        {"agent_id": None},
        {"max_calls": 41},
        {"per_day": 6},
        {"purpose": "other"},
        {"expires_at": NOW + timedelta(days=8)},
        {"constraints": {"to": {"one_of": [*FAMILY, "+447700900003"]}}},
        {"tools": (SMS_TOOL, LAMP_TOOL)},
    ):
        assert canonical_json(canonical(_mandate(**changes))) != base, changes


def test_a_live_mandate_covers_only_its_agents_listed_tool_within_every_constraint() -> None:
    mandate = _mandate()
    ok = {"to": FAMILY[0], "body": "home at 6"}
    assert covers(mandate, "claude", SMS_TOOL, ok, NOW)
    assert not covers(mandate, "other-agent", SMS_TOOL, ok, NOW)
    assert not covers(mandate, "claude", LAMP_TOOL, {"on": True}, NOW)
    assert not covers(mandate, "claude", SMS_TOOL, {**ok, "to": "+447700900009"}, NOW)
    assert not covers(mandate, "claude", SMS_TOOL, {**ok, "body": "x" * 161}, NOW)
    assert not covers(mandate, "claude", SMS_TOOL, {"to": FAMILY[0]}, NOW)  # an absent value never holds
    assert covers(replace(mandate, agent_id=None), "other-agent", SMS_TOOL, ok, NOW)


def test_a_mandate_covers_nothing_unsigned_expired_exhausted_revoked_or_spent_for_the_day() -> None:
    ok = {"to": FAMILY[0], "body": "hi"}
    day = NOW.date().isoformat()
    assert not covers(_mandate(status=MandateStatus.AWAITING_SIGNATURE), "claude", SMS_TOOL, ok, NOW)
    assert not covers(_mandate(status=MandateStatus.REVOKED), "claude", SMS_TOOL, ok, NOW)
    assert not covers(_mandate(), "claude", SMS_TOOL, ok, NOW + timedelta(days=7))
    assert _mandate().status_at(NOW + timedelta(days=7)) is MandateStatus.EXPIRED
    assert _mandate(used=40).status_at(NOW) is MandateStatus.EXHAUSTED
    assert not covers(_mandate(used=40), "claude", SMS_TOOL, ok, NOW)
    assert not covers(_mandate(used=5, used_today=5, day=day), "claude", SMS_TOOL, ok, NOW)
    # the server's UTC day turns at midnight: 31 minutes later the day's count starts again
    assert covers(
        _mandate(used=5, used_today=5, day=day), "claude", SMS_TOOL, ok, NOW + timedelta(minutes=31)
    )


def test_where_several_cover_a_call_the_one_expiring_first_is_used() -> None:
    ok = {"to": FAMILY[0], "body": "hi"}
    later = _mandate(mandate_id="mnd_later")
    sooner = _mandate(mandate_id="mnd_sooner", expires_at=NOW + timedelta(days=1))
    assert [m.mandate_id for m in first_covering([later, sooner], "claude", SMS_TOOL, ok, NOW)] == [
        "mnd_sooner",
        "mnd_later",
    ]


def test_a_pattern_from_an_agent_finishes_on_the_longest_value_it_is_tried_on() -> None:
    # The patterns compile_pattern lets through take well under a tenth of a second on a thousand
    # characters; one that backtracks without bound would take longer than any machine's run. The bound
    # is wide so that a busy machine never fails it: it tells finishing from not finishing.
    for pattern in (".*a?b?c?d?e?x", "^[a-z]+ [a-z]{1,9}$", "(?:a|b|c|d)x.*y"):
        compiled = compile_pattern("to", pattern)
        started = time.perf_counter()
        compiled.search("a" * 1000)
        assert time.perf_counter() - started < 20


@given(
    used=st.integers(0, 50),
    used_today=st.integers(0, 10),
    per_day=st.none() | st.integers(1, 40),
    hours=st.integers(-1, 24 * 8),
)
def test_a_mandate_never_covers_a_call_past_any_count_or_its_window(
    used: int, used_today: int, per_day: int | None, hours: int
) -> None:
    mandate = _mandate(used=used, used_today=used_today, per_day=per_day, day=NOW.date().isoformat())
    now = NOW + timedelta(hours=hours)
    covered = covers(mandate, "claude", SMS_TOOL, {"to": FAMILY[1], "body": "hi"}, now)
    today = used_today if now.date() == NOW.date() else 0
    expected = used < 40 and now < mandate.expires_at and (per_day is None or today < per_day)
    assert covered is expected


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "tools": st.lists(st.sampled_from([SMS_TOOL, LAMP_TOOL, "x"]), max_size=3) | _JSON,
            "constraints": st.dictionaries(
                st.sampled_from(["to", "body", "on", "level", "x"]),
                st.dictionaries(
                    st.sampled_from(["equals", "one_of", "matches", "max", "max_length", "y"]),
                    _JSON | st.from_regex(r"[a(){}*+?|\\0-9,]{0,12}", fullmatch=True),
                    max_size=2,
                ),
                max_size=3,
            )
            | _JSON,
            "max_calls": _JSON,
            "per_day": _JSON,
            "expires_in_seconds": _JSON,
            "purpose": _JSON,
            "agent_id": _JSON,
        },
    )
)
def test_any_asked_for_mandate_is_taken_or_refused_with_a_reason_never_an_error(body: dict[str, Any]) -> None:
    try:
        check_bounds(body, TOOLS, None)
    except InvalidInput as e:
        said = e.message
    else:
        said = "taken"
    assert said


def test_a_mandate_is_signed_or_denied_only_while_it_awaits_a_signature() -> None:
    waiting = _mandate(status=MandateStatus.AWAITING_SIGNATURE)
    signed = waiting.ended(MandateStatus.ACTIVE, "phone", NOW)
    assert (signed.status, signed.decided_by, signed.decided_at) == (MandateStatus.ACTIVE, "phone", NOW)
    with pytest.raises(Conflict) as refused:
        signed.ended(MandateStatus.DENIED, "phone", NOW)
    assert refused.value.message == "This mandate is active; it can no longer be signed."
    with pytest.raises(Conflict) as refused:
        waiting.ended(MandateStatus.ACTIVE, "phone", NOW + timedelta(minutes=5))
    assert refused.value.message == "This mandate is expired; it can no longer be signed."


def test_a_mandate_may_be_revoked_in_any_state_but_revoked_or_denied() -> None:
    for status in (MandateStatus.AWAITING_SIGNATURE, MandateStatus.ACTIVE):
        revoked = _mandate(status=status).ended(MandateStatus.REVOKED, "ana", NOW)
        assert (revoked.status, revoked.decided_by) == (MandateStatus.REVOKED, "ana")
    assert _mandate(used=40).ended(MandateStatus.REVOKED, "ana", NOW).status is MandateStatus.REVOKED
    for status in (MandateStatus.REVOKED, MandateStatus.DENIED):
        with pytest.raises(Conflict) as refused:
            _mandate(status=status).ended(MandateStatus.REVOKED, "ana", NOW)
        assert refused.value.message == f"This mandate is {status.value} already."


def test_a_mandate_is_shown_with_its_counts_for_the_server_day() -> None:
    day = NOW.date().isoformat()
    shown = _mandate(used=3, used_today=2, day=day, approval_id="ap_1").as_dict(NOW)
    assert shown == {
        "mandate_id": "mnd_1",
        "agent_id": "claude",
        "tools": [SMS_TOOL],
        "constraints": {"to": {"one_of": FAMILY}, "body": {"max_length": 160}},
        "max_calls": 40,
        "per_day": 5,
        "purpose": "texts to Mum and Dad",
        "status": "active",
        "used": 3,
        "used_today": 2,
        "created_at": "2026-12-04T23:30:00+00:00",
        "expires_at": "2026-12-11T23:30:00+00:00",
        "approval_id": "ap_1",
    }
    assert _mandate(used=3, used_today=2, day=day).as_dict(NOW + timedelta(hours=1))["used_today"] == 0
