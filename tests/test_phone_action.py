"""phone_action (reference 001): the catalogue's checks, texts, availability and tool definition.

The calls and texts are pinned by ``tests/data/phone_action_cases.json``, vectors another implementation can
run as they are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapgate.domain.errors import PhoneActionRefused, TapgateError
from tapgate.domain.phone_action import (
    catalogue,
    cut_message,
    is_available,
    is_offered,
    no_answer_text,
    result_text,
    tool_definition,
    unavailable_text,
    validate,
)

CASES: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "phone_action_cases.json").read_text(encoding="utf-8")
)
CALLS: list[dict[str, Any]] = CASES["calls"]
PASSING = [c for c in CALLS if c["kind"] == "passes"]
REFUSED = [c for c in CALLS if c["kind"] != "passes"]

ACTIONS_OF_001 = [
    "alarm", "timer", "calendar_event", "sms_draft", "email_draft", "dial", "navigate", "add_stop",
    "search_nearby", "stop_navigation", "open_app", "open_url", "media", "torch", "settings_panel",
    "automation_intent",
]  # fmt: skip
CHECK_ORDER_OF_001 = [
    "time", "days", "seconds", "start", "end", "to", "cc", "number", "destination", "stop", "stops", "mode",
    "near", "command", "panel", "url", "on", "values",
]  # fmt: skip
DONE_ALARM = "Done: the person confirmed alarm on their phone and the phone carried it out."


def _canonical(value: object) -> str:
    # json.dumps tells True from 1 and 60 from 60.0, which == does not.
    return json.dumps(value, sort_keys=True)


def _name(case: dict[str, Any]) -> str:
    return str(case["name"])


# Calls


@pytest.mark.parametrize("case", PASSING, ids=_name)
def test_a_call_that_passes_reaches_the_phone_exactly_as_the_case_says(case: dict[str, Any]) -> None:
    assert _canonical(validate(case["arguments"]).payload()) == _canonical(case["payload"])


@pytest.mark.parametrize("case", REFUSED, ids=_name)
def test_a_call_that_fails_is_refused_with_the_case_s_text_word_for_word(case: dict[str, Any]) -> None:
    with pytest.raises(PhoneActionRefused) as refused:
        validate(case["arguments"])
    assert refused.value.text == case["refused"]
    assert refused.value.reason == case["kind"]
    assert refused.value.code == "phone_action_invalid"
    assert isinstance(refused.value, TapgateError)


@pytest.mark.parametrize("action", ACTIONS_OF_001)
def test_every_action_passes_a_good_call_and_refuses_a_missing_and_a_bad_one(action: str) -> None:
    mine = [c for c in CALLS if c["arguments"].get("action") == action]
    kinds = {c["kind"] for c in mine}
    needs_something = bool(catalogue().actions[action].required)
    assert kinds >= ({"passes", "missing", "bad"} if needs_something else {"passes", "bad"})
    for case in mine:
        if case["kind"] == "passes":
            assert _canonical(validate(case["arguments"]).payload()) == _canonical(case["payload"])
        else:
            with pytest.raises(PhoneActionRefused, match="^" + re.escape(case["refused"]) + "$"):
                validate(case["arguments"])


def test_the_catalogue_has_001s_sixteen_actions_in_order() -> None:
    assert list(catalogue().actions) == ACTIONS_OF_001


def test_fields_are_checked_in_001s_order() -> None:
    check = list(catalogue().check)
    assert check[: len(CHECK_ORDER_OF_001)] == CHECK_ORDER_OF_001
    assert check[-1] == "summary"


def test_a_refusal_names_the_field_for_the_audit_and_never_repeats_the_value() -> None:
    with pytest.raises(PhoneActionRefused) as refused:
        validate({"action": "dial", "number": "call-me-SECRET"})
    assert refused.value.field == "number"
    assert "SECRET" not in refused.value.text


def test_a_missing_group_lists_its_names_joined_with_or_and_entries_joined_with_and() -> None:
    with pytest.raises(PhoneActionRefused) as refused:
        validate({"action": "email_draft"})
    assert refused.value.text == "email_draft needs to or subject or body."


def test_an_action_name_is_read_trimmed() -> None:
    assert validate({"action": " torch ", "on": True}).payload() == {
        "action": "torch",
        "summary": "torch",
        "on": True,
    }


def test_changing_a_payload_does_not_change_the_accepted_call() -> None:
    call = validate({"action": "sms_draft", "to": ["Ana"], "body": "hi"})
    payload = call.payload()
    to = payload["to"]
    assert isinstance(to, list)
    to.append("Mallory")
    assert call.payload()["to"] == ["Ana"]


# Results


@pytest.mark.parametrize("case", CASES["results"], ids=_name)
def test_the_phone_s_answer_reads_as_the_case_says(case: dict[str, Any]) -> None:
    assert result_text(case["status"], case["message"], case["action"]) == case["text"]


def test_a_message_longer_than_message_max_chars_is_cut_there() -> None:
    assert catalogue().message_max_chars == 500
    text = result_text("done", "é" * 500 + "TAIL", "alarm")
    assert text == DONE_ALARM + "\n\nThe phone says: " + "é" * 500


def test_a_message_cut_after_a_space_does_not_end_in_one() -> None:
    assert cut_message("a" * 499 + "  tail") == "a" * 499


def test_a_message_of_exactly_message_max_chars_is_kept_whole() -> None:
    assert cut_message("x" * 499 + "y") == "x" * 499 + "y"


def test_a_missing_or_blank_message_is_no_message() -> None:
    assert cut_message(None) is None
    assert cut_message(" \t\n") is None


@pytest.mark.parametrize("case", CASES["no_answer"], ids=lambda c: str(c["action"]))
def test_no_answer_in_time_reads_the_no_answer_text(case: dict[str, Any]) -> None:
    assert no_answer_text(case["action"]) == case["text"]


def test_the_phone_is_waited_for_up_to_wait_seconds() -> None:
    assert catalogue().wait_seconds == 120


def test_a_call_with_no_phone_reads_the_unavailable_text_word_for_word() -> None:
    assert unavailable_text() == CASES["unavailable"]


# Who offers it


def test_an_attended_chat_whose_latest_message_came_from_the_phone_can_act() -> None:
    assert is_available(True, ["phone_actions"], "chat")
    assert is_available(True, {"phone_actions", "camera"}, "chat")


def test_a_chat_whose_latest_message_came_from_elsewhere_cannot_act() -> None:
    assert not is_available(True, [], "chat")
    assert not is_available(True, ["camera"], "chat")


def test_a_chat_nobody_attends_cannot_act() -> None:
    assert not is_available(False, ["phone_actions"], "chat")


@pytest.mark.parametrize("kind", ["schedule", "subagent", "triage"])
def test_a_session_that_is_not_a_chat_cannot_act(kind: str) -> None:
    assert not is_available(True, ["phone_actions"], kind)


def test_the_tool_is_offered_once_any_message_came_with_the_capability() -> None:
    assert is_offered({"phone_actions"}, "chat")
    assert not is_offered(set(), "chat")
    assert not is_offered({"phone_actions"}, "schedule")


# The tool definition


def test_the_openai_definition_is_a_strict_function_named_phone_action() -> None:
    definition = tool_definition()
    assert definition["type"] == "function"
    function = definition["function"]
    assert isinstance(function, dict)
    assert function["name"] == "phone_action"
    parameters = function["parameters"]
    assert parameters["type"] == "object"
    assert parameters["additionalProperties"] is False
    assert parameters["required"] == ["action"]
    assert parameters["properties"]["action"]["enum"] == ACTIONS_OF_001


def test_the_schema_has_a_property_for_every_field_an_action_reads() -> None:
    properties = tool_definition("mcp")["inputSchema"]
    assert isinstance(properties, dict)
    read = {f for a in catalogue().actions.values() for f in a.fields}
    assert set(properties["properties"]) == {"action", "summary", *read}


def test_the_schema_gives_each_field_its_type_and_what_it_must_be() -> None:
    properties = tool_definition("mcp")["inputSchema"]["properties"]  # type: ignore[index]
    assert properties["seconds"]["type"] == "integer"
    assert (properties["seconds"]["minimum"], properties["seconds"]["maximum"]) == (1, 86400)
    assert properties["on"]["type"] == "boolean"
    assert properties["days"]["items"]["enum"] == ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    assert properties["mode"]["enum"] == ["drive", "walk", "bicycle", "transit"]
    assert properties["values"]["additionalProperties"] == {"type": "string"}
    assert properties["stops"]["items"]["additionalProperties"] is False
    assert "a time as HH:MM (hours 00-23, minutes 00-59)" in properties["time"]["description"]
    assert "(navigate, add_stop)" in properties["destination"]["description"]


def test_the_description_tells_the_model_to_keep_the_route_s_destination_for_add_stop() -> None:
    description = tool_definition("mcp")["description"]
    assert isinstance(description, str)
    assert (
        "For add_stop, keep the route's destination: give destination as the person told it when the route "
        "began." in description
    )


def test_the_description_lists_every_action_with_what_it_does() -> None:
    description = tool_definition()["function"]["description"]  # type: ignore[index]
    for action in catalogue().actions.values():
        assert f"\n- {action.name}: {action.does}\n" in description


def test_a_tool_format_other_than_openai_or_mcp_is_refused() -> None:
    with pytest.raises(ValueError, match="tool_format"):
        tool_definition("anthropic")


def test_the_mcp_definition_matches_the_openai_one() -> None:
    mcp, openai = tool_definition("mcp"), tool_definition("openai")["function"]
    assert isinstance(openai, dict)
    assert mcp == {
        "name": openai["name"],
        "description": openai["description"],
        "inputSchema": openai["parameters"],
    }


# Any input at all

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**6), max_value=10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
_KEYS = st.sampled_from(["action", *catalogue().fields, "lat", "lon", "query"]) | st.text(max_size=8)
_ACTION = st.sampled_from(ACTIONS_OF_001) | _JSON


@given(st.dictionaries(_KEYS, _JSON, max_size=8), _ACTION)
def test_any_arguments_are_either_refused_or_delivered_with_only_the_action_s_fields(
    arguments: dict[str, object], action: object
) -> None:
    refusal, call = None, None
    try:
        call = validate({**arguments, "action": action})
    except PhoneActionRefused as refused:
        refusal = refused.text
    if call is None:
        assert refusal is not None and "{{" not in refusal
        return
    payload = call.payload()
    assert set(payload) <= {"action", "summary", *catalogue().actions[call.action].fields}
    assert _canonical(validate(payload).payload()) == _canonical(payload)
