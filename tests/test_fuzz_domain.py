"""Property tests of the parsers that take untrusted input and were not fuzzed elsewhere: device frames,
capability manifests, signature decoding and the signed text (phone_action's validator and tool names
have theirs in test_phone_action and test_sessions_and_tools)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tapgate.domain.approvals import signed_text, verify_decision
from tapgate.domain.devices import parse_manifest
from tapgate.domain.errors import InvalidInput, SignatureRefused, TapgateError
from tapgate.domain.frames import DeviceAuth, DeviceEvent, DeviceResult, parse_frame
from tapgate.domain.invocations import device_status
from tapgate.domain.text import check_display_text
from tests.reliability import scaled
from tests.world import new_key

EXAMPLES = settings(
    max_examples=scaled(150, 3000), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)
FRAME_KEYS = st.sampled_from(
    ["type", "callId", "status", "message", "ok", "result", "error", "deviceId", "token"]
)
FRAMES = st.dictionaries(FRAME_KEYS, JSON, max_size=6).map(
    lambda d: d | {"type": d.get("type", "device:result")}
) | st.fixed_dictionaries(
    {"type": st.sampled_from(["device:result", "device:auth", "device:event", "device:bogus"])},
    optional={"callId": JSON, "status": JSON, "message": JSON, "ok": JSON, "capability": JSON, "data": JSON},
)


@EXAMPLES
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300), FRAMES.map(json.dumps)))
@example('{"type": "device:result", "callId": "0", "status": ""}')  # found by the full run (3,000 examples)
def test_any_frame_is_parsed_or_dropped_and_never_raises(raw: str | bytes) -> None:
    frame = parse_frame(raw)
    assert frame is None or isinstance(frame, DeviceAuth | DeviceResult | DeviceEvent)
    if isinstance(frame, DeviceResult):
        # Any word passes the parser: one that is not an answer is acked `invalid` (device-protocol.md).
        try:
            assert device_status(frame.status).value in ("done", "declined", "failed")
        except InvalidInput:
            assert frame.status not in ("done", "declined", "failed", "sent", "cancelled")
        assert isinstance(frame.call_id, str) and frame.call_id


CAPABILITY = st.fixed_dictionaries(
    {"name": st.text(max_size=35) | st.sampled_from(["set_light", "sms_send", "phone_actions"])},
    optional={
        "kind": st.sampled_from(["sensor", "actuator"]) | JSON,
        "description": st.text(max_size=60) | JSON,
        "params": st.dictionaries(
            st.text(max_size=20), JSON | st.fixed_dictionaries({"type": st.text(max_size=8)})
        ),
        "confirm": JSON,
        "granted": JSON,
    },
)


@EXAMPLES
@given(st.lists(CAPABILITY, max_size=4) | JSON)
def test_any_manifest_is_accepted_clean_or_refused_with_a_field(entries: Any) -> None:
    try:
        declared = parse_manifest(entries)
    except InvalidInput as e:
        refused: InvalidInput = e
        assert refused.field.startswith("capabilities")
        return
    for d in declared:
        capability = d.capability
        assert capability.description == check_display_text(capability.description, "description", 10_000)
        assert len(capability.name) <= 30


@EXAMPLES
@given(
    st.sampled_from(["p256", "ed25519"]),
    st.one_of(st.text(max_size=200), st.binary(max_size=120).map(lambda b: base64.b64encode(b).decode())),
)
def test_any_signature_text_is_refused_with_the_one_opaque_error(alg: str, signature: str) -> None:
    key = _KEYS[alg]
    with pytest.raises(SignatureRefused) as refused:
        verify_decision(alg, key.public_b64, "tapgate-approval-v1\n", signature)
    assert refused.value.message == SignatureRefused("x").message  # the same words whatever the reason


_KEYS = {"p256": new_key("p256"), "ed25519": new_key("ed25519")}


@EXAMPLES
@given(st.text(max_size=30), st.text(max_size=30), st.text(max_size=40), st.integers())
def test_the_signed_text_is_eight_lines_or_refused(
    kind: str, subject: str, approval: str, expires: int
) -> None:
    try:
        text = signed_text(
            "tapgate-approval-v1", approval, "approved", kind, subject, "a" * 64, "b" * 32, expires
        )
    except TapgateError:
        return
    assert text.endswith("\n") and text.count("\n") == 8
