"""Who answers an approval and what its card shows, judged on the domain rules alone (no store, no server)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tapgate.domain.approvals import SignBlock
from tapgate.domain.devices import (
    APPROVALS,
    BUILTINS,
    SMS_SEND,
    Capability,
    CapabilityKind,
    Declared,
    Device,
    DeviceStatus,
    Param,
    ParamType,
)
from tapgate.domain.errors import Conflict
from tapgate.domain.inbox import (
    THE_DEVICE_ASKS,
    THE_POLICY_ASKS,
    YOUR_ASSISTANT,
    Approval,
    ApprovalStatus,
    answers,
    binding_code,
    erased_preview,
    may_answer,
    prompt_for,
    render_preview,
    why_asked,
)
from tapgate.domain.shown import PREVIEW_MAX, VALUE_MAX, TooLongToShow
from tapgate.domain.vouching import (
    DEVICE_PAIR,
    key_fingerprint,
    pairing_arguments,
    pairing_preview,
    pairing_prompt,
)

NOW = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
KEY = base64.b64encode(b"a device's public key, as DER").decode()
LIGHT = Capability(
    "set_light",
    CapabilityKind.ACTUATOR,
    "Turn the light on or off.",
    (
        Param("on", ParamType.BOOLEAN, True, true_label="Light on", false_label="Light off"),
        Param("level", ParamType.INTEGER, label="Brightness"),
        Param("room_name", ParamType.STRING),
    ),
    confirm=True,
)
QUIET_LIGHT = replace(LIGHT, name="dim_light", confirm=False)


def _device(
    *declared: Declared, status: DeviceStatus = DeviceStatus.ACTIVE, device_id: str = "lamp"
) -> Device:
    return Device(
        tenant_id="t",
        user_id="u",
        device_uid="uid-" + device_id,
        device_id=device_id,
        name="Desk lamp",
        kind="lamp",
        alg="p256",
        public_key=KEY,
        status=status,
        created_at=NOW,
        capabilities=declared,
    )


def _phone(granted: bool = True, status: DeviceStatus = DeviceStatus.ACTIVE) -> Device:
    return _device(Declared(BUILTINS[APPROVALS], granted), status=status, device_id="phone")


def _approval(
    kind: str = "set_light", subject: str = "lamp", invocation_id: str | None = "inv-1"
) -> Approval:
    return Approval(
        tenant_id="t",
        approval_id="ap-1",
        user_id="u",
        agent_id="a",
        invocation_id=invocation_id,
        kind=kind,
        subject=subject,
        prompt="",
        preview={},
        sign=SignBlock("tapgate-approval-v1", "c", 0, "0" * 64),
        binding_code="ACDE",
        status=ApprovalStatus.PENDING,
        created_at=NOW,
        expires_at=NOW + timedelta(minutes=5),
    )


def test_an_active_approver_answers_every_approval_of_its_person() -> None:
    phone = _phone()
    assert may_answer(phone, "set_light", "lamp", call=True)
    assert may_answer(phone, DEVICE_PAIR, "new-tablet", call=False)
    assert answers(phone, _approval(kind="console_login", subject="phone", invocation_id=None))


@pytest.mark.parametrize("status", [DeviceStatus.PENDING, DeviceStatus.REVOKED])
def test_an_approver_that_is_not_active_answers_nothing(status: DeviceStatus) -> None:
    assert not may_answer(_phone(status=status), "set_light", "lamp", call=True)
    lamp = _device(Declared(LIGHT, granted=True), status=status)
    assert not may_answer(lamp, "set_light", "lamp", call=True)


def test_a_device_declaring_approvals_without_the_grant_is_no_approver() -> None:
    assert not may_answer(_phone(granted=False), "set_light", "lamp", call=True)


def test_a_device_confirms_a_call_to_itself_on_a_capability_it_declares_with_confirm() -> None:
    lamp = _device(Declared(LIGHT, granted=True))
    assert may_answer(lamp, "set_light", "lamp", call=True)
    assert answers(lamp, _approval())


def test_a_device_answers_no_call_to_another_device_nor_one_no_agent_waits_on() -> None:
    lamp = _device(Declared(LIGHT, granted=True))
    assert not may_answer(lamp, "set_light", "other-lamp", call=True)
    assert not may_answer(lamp, "set_light", "lamp", call=False)
    assert not answers(lamp, _approval(invocation_id=None))


def test_a_device_answers_no_call_on_a_capability_it_does_not_declare_or_declares_without_confirm() -> None:
    lamp = _device(Declared(QUIET_LIGHT, granted=True))
    assert not may_answer(lamp, "dim_light", "lamp", call=True)
    assert not may_answer(lamp, "set_light", "lamp", call=True)


def test_only_an_approval_an_agents_call_waits_on_lets_the_person_say_it_was_not_them() -> None:
    assert _approval().agent_asks
    assert not _approval(invocation_id=None).agent_asks


def test_deciding_a_pending_approval_records_who_when_and_what() -> None:
    decided = _approval().decided(ApprovalStatus.APPROVED, "phone", NOW)
    assert (decided.status, decided.decided_by, decided.decided_at) == (ApprovalStatus.APPROVED, "phone", NOW)


def test_an_approval_is_decided_once() -> None:
    denied = _approval().decided(ApprovalStatus.DENIED, "phone", NOW)
    with pytest.raises(Conflict) as refused:
        denied.decided(ApprovalStatus.APPROVED, "phone", NOW)
    assert refused.value.message == "This approval was decided already: denied."


def test_an_erased_preview_keeps_only_its_kind_and_says_it_was_erased() -> None:
    assert erased_preview("sms_send") == {"kind": "sms_send", "fields": [], "erased": True}


def test_a_binding_code_is_four_letters_none_of_which_is_misread_aloud() -> None:
    codes = {binding_code() for _ in range(200)}
    assert all(len(code) == 4 for code in codes)
    assert not set("".join(codes)) & set("0O1IL2Z5S8B")
    assert len(codes) > 150


def test_the_card_says_why_the_person_is_asked() -> None:
    assert why_asked(policy_asks=True, policy_message="Texts to new numbers ask first") == (
        "Texts to new numbers ask first"
    )
    assert why_asked(policy_asks=True, policy_message="") == THE_POLICY_ASKS
    assert why_asked(policy_asks=False, policy_message="ignored") == THE_DEVICE_ASKS


def test_a_preview_shows_every_argument_in_the_capabilitys_order_with_its_label() -> None:
    arguments: dict[str, Any] = {"extra_note": "hi", "room_name": "study", "level": 40, "on": True}
    preview = render_preview(LIGHT, arguments, who="Claude", why="the device asks for a yes")
    assert preview == {
        "kind": "set_light",
        "title": "Set light",
        "description": "Turn the light on or off.",
        "who": "Claude",
        "why": "the device asks for a yes",
        "fields": [
            {"label": "On", "value": "Light on"},
            {"label": "Brightness", "value": "40"},
            {"label": "Room name", "value": "study"},
            {"label": "Extra note", "value": "hi"},
        ],
    }


def test_a_preview_names_the_assistant_when_the_agent_has_no_name_and_gives_no_reason_unless_told() -> None:
    preview = render_preview(LIGHT, {})
    assert (preview["who"], preview["why"]) == (YOUR_ASSISTANT, "")


def test_a_boolean_reads_as_the_manifests_words_or_yes_and_no() -> None:
    assert render_preview(LIGHT, {"on": False})["fields"] == [{"label": "On", "value": "Light off"}]
    plain = replace(LIGHT, params=(Param("on", ParamType.BOOLEAN),))
    assert [f["value"] for f in render_preview(plain, {"on": True})["fields"]] == ["yes"]
    assert [f["value"] for f in render_preview(plain, {"on": False})["fields"]] == ["no"]
    assert [f["value"] for f in render_preview(plain, {"loud": True, "quiet": False})["fields"]] == [
        "yes",
        "no",
    ]


def test_a_preview_may_fill_its_whole_length_and_not_one_character_more() -> None:
    names = [f"p{i}" for i in range(PREVIEW_MAX // VALUE_MAX + 1)]
    whole = dict.fromkeys(names[:-1], "x" * VALUE_MAX)
    assert sum(len(f["value"]) for f in render_preview(LIGHT, whole)["fields"]) == PREVIEW_MAX
    with pytest.raises(TooLongToShow):
        render_preview(LIGHT, {**whole, names[-1]: "x"})


def test_the_card_leads_with_who_asks_what_on_which_device() -> None:
    lamp = _device(Declared(LIGHT, granted=True))
    assert prompt_for(lamp, LIGHT, "claude") == "Claude asks to use Desk lamp: Set light."
    assert prompt_for(lamp, LIGHT, "") == "Your assistant asks to use Desk lamp: Set light."
    assert (
        prompt_for(lamp, BUILTINS[SMS_SEND], "claude") == "Claude asks to send a text message from Desk lamp."
    )


def test_a_key_fingerprint_is_the_first_sixteen_hex_digits_of_the_keys_sha256() -> None:
    expected = hashlib.sha256(b"a device's public key, as DER").hexdigest()[:16]
    assert key_fingerprint(KEY) == expected


def test_a_pairing_card_shows_and_signs_the_new_device_and_its_comparison_code() -> None:
    arguments = pairing_arguments(_device(device_id="tablet"), "4711")
    assert arguments == {
        "device_id": "tablet",
        "name": "Desk lamp",
        "kind": "lamp",
        "key_fingerprint": key_fingerprint(KEY),
        "comparison_code": "4711",
    }
    assert pairing_preview(arguments) == {
        "kind": DEVICE_PAIR,
        "fields": [
            {"label": "New device", "value": "Desk lamp"},
            {"label": "Device id", "value": "tablet"},
            {"label": "Kind", "value": "lamp"},
            {"label": "Key fingerprint", "value": key_fingerprint(KEY)},
            {"label": "Comparison code", "value": "4711"},
        ],
    }
    assert pairing_prompt(_device()) == (
        "A new device, Desk lamp, asks to join your account. "
        "Approve only if it shows the same comparison code."
    )
