"""Approval signatures: the signed text, the planned action's hash, verification, and the vectors file.

Every run checks the committed ``tests/data/test-vectors.json`` and a freshly generated document. To
replace the committed file with a fresh one:
``TAPGATE_REGENERATE_VECTORS=1 .venv/bin/pytest tests/test_approval_signatures.py -k freshly``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from hypothesis import given
from hypothesis import strategies as st

from tapgate.domain.approvals import (
    APPROVAL_FORMAT,
    PrivateKey,
    action_sha256,
    canonical_json,
    new_sign_block,
    preview_sha256,
    sign_decision,
    signed_text,
    verify_decision,
)
from tapgate.domain.errors import Forbidden, InvalidInput, SignatureRefused, VectorsError
from tapgate.domain.keys import KeyAlgorithm, canonical_public_key
from tapgate.domain.vectors import check_vectors, generate_vectors

VECTORS_FILE = Path(__file__).parent / "data" / "test-vectors.json"
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

TOOL, DEVICE, CAPABILITY = "device__ana_phone__sms_send", "ana-phone", "sms_send"
ARGUMENTS = {"to": "+351912345678", "text": "Até já"}
PREVIEW = {"kind": "sms_send", "fields": [{"label": "To", "value": "+351 912 345 678"}]}
ACTION = action_sha256(TOOL, DEVICE, CAPABILITY, ARGUMENTS, PREVIEW)
FIELDS: dict[str, Any] = {
    "format": APPROVAL_FORMAT,
    "approval_id": "apr_0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    "decision": "approved",
    "kind": "sms_send",
    "subject": "ana-phone",
    "action_sha256": ACTION,
    "challenge": "00112233445566778899aabbccddeeff",
    "expires": 1_796_040_000,
}


def text(**changes: Any) -> str:
    return signed_text(**{**FIELDS, **changes})


@dataclass(frozen=True)
class Signer:
    """A device key and how it encodes its signatures."""

    name: str
    alg: KeyAlgorithm
    key: PrivateKey
    raw: bool = False

    @property
    def public_key(self) -> str:
        return canonical_public_key(self.key.public_key())

    def sign(self, payload: str) -> str:
        return sign_decision(self.key, payload, raw=self.raw)

    def sign_bytes(self, payload: str) -> bytes:
        return base64.b64decode(self.sign(payload))


def _p256() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


_P256_KEY = _p256()
SIGNERS = [
    Signer("p256-der", KeyAlgorithm.P256, _P256_KEY),
    Signer("p256-raw", KeyAlgorithm.P256, _P256_KEY, raw=True),
    Signer("ed25519", KeyAlgorithm.ED25519, ed25519.Ed25519PrivateKey.generate()),
]
DER, RAW, ED25519 = SIGNERS


@pytest.fixture(params=SIGNERS, ids=lambda s: s.name)
def signer(request: pytest.FixtureRequest) -> Signer:
    result: Signer = request.param
    return result


def refusal(signer: Signer, payload: str, signature: str) -> str:
    """The audit detail of a refused signature; fail if it verifies or is refused any other way."""
    with pytest.raises(SignatureRefused) as refused:
        verify_decision(signer.alg, signer.public_key, payload, signature)
    return refused.value.detail


def b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode()


def der(r: bytes, s: bytes) -> bytes:
    body = bytes([2, len(r)]) + r + bytes([2, len(s)]) + s
    return bytes([0x30, len(body)]) + body


def raw_signature_not_starting_like_der(payload: str) -> bytes:
    """An r‖s whose first byte is not DER's SEQUENCE tag, so a cut or padded copy is not read as DER."""
    while (blob := RAW.sign_bytes(payload))[0] == 0x30:
        pass
    return blob


# P-256 arithmetic, only to make the public key for which a chosen (r, s) is a valid signature: how the
# tests reach a 64-byte DER signature and a raw r‖s that also parses as DER, which honest signing makes
# only once in 2^40 or more signatures.
_P = 2**256 - 2**224 + 2**192 + 2**96 - 1
_B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
_G = (
    0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
    0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5,
)
_Point = tuple[int, int] | None


def _add(a: _Point, b: _Point) -> _Point:
    if a is None or b is None:
        return a or b
    if a[0] == b[0] and (a[1] + b[1]) % _P == 0:
        return None
    if a == b:
        slope = (3 * a[0] * a[0] - 3) * pow(2 * a[1], -1, _P) % _P
    else:
        slope = (b[1] - a[1]) * pow(b[0] - a[0], -1, _P) % _P
    x = (slope * slope - a[0] - b[0]) % _P
    return x, (slope * (a[0] - x) - a[1]) % _P


def _times(k: int, point: _Point) -> _Point:
    result: _Point = None
    while k:
        if k & 1:
            result = _add(result, point)
        point, k = _add(point, point), k >> 1
    return result


def _point_at(x: int) -> _Point:
    y_squared = (x**3 - 3 * x + _B) % _P
    y = pow(y_squared, (_P + 1) // 4, _P)
    return (x, y) if y * y % _P == y_squared else None


def key_that_signed(r: int, s: int, payload: str) -> ec.EllipticCurvePublicKey:
    """The public key Q = r⁻¹(sR − zG) for which (r, s) is a valid signature over ``payload``."""
    point = _point_at(r)
    assert point is not None and 0 < r < P256_ORDER and 0 < s < P256_ORDER
    z = int.from_bytes(hashlib.sha256(payload.encode()).digest(), "big")
    q = _times(pow(r, -1, P256_ORDER), _add(_times(s, point), _times(P256_ORDER - z % P256_ORDER, _G)))
    assert q is not None
    return ec.EllipticCurvePublicNumbers(q[0], q[1], ec.SECP256R1()).public_key()


def first_x_on_the_curve(start: int) -> int:
    return next(x for x in range(start, start + 1000) if _point_at(x) is not None)


# --- what verifies ---------------------------------------------------------------------------------


@pytest.mark.parametrize("decision", ["approved", "denied"])
def test_a_device_signature_over_the_signed_text_verifies(signer: Signer, decision: str) -> None:
    payload = text(decision=decision)
    signature = signer.sign(payload)
    verify_decision(signer.alg, signer.public_key, payload, signature)
    verify_decision(signer.alg, signer.key.public_key(), payload, signature)


def test_a_url_safe_signature_without_padding_verifies_too(signer: Signer) -> None:
    payload = text()
    url_safe = base64.urlsafe_b64encode(signer.sign_bytes(payload)).decode().rstrip("=")
    verify_decision(signer.alg, signer.public_key, payload, url_safe)


def test_a_der_signature_that_happens_to_be_64_bytes_is_read_as_der() -> None:
    payload = text()
    r = first_x_on_the_curve(2**225)  # 29 bytes: with a 29-byte s, DER takes 2 + 2 + 29 + 2 + 29 = 64
    s = 2**225 + 12345
    signature = encode_dss_signature(r, s)
    assert len(signature) == 64
    verify_decision("p256", key_that_signed(r, s, payload), payload, b64(signature))


def test_a_raw_signature_that_also_parses_as_der_is_still_read_as_raw() -> None:
    payload = text()
    # 64 bytes laid out as a DER SEQUENCE of two 29-byte integers: 30 3e | 02 1d <29> | 02 1d <29>
    head = bytes.fromhex("303e021d") + b"\x11" * 27
    r = next(
        x for tail in range(256) if _point_at(x := int.from_bytes(head + bytes([tail]), "big")) is not None
    )
    rest = bytes([0x22]) + bytes.fromhex("021d") + b"\x33" * 29
    blob = r.to_bytes(32, "big") + rest
    assert decode_dss_signature(blob)  # strict DER, yet not the signature
    s = int.from_bytes(blob[32:], "big")
    verify_decision("p256", key_that_signed(r, s, payload), payload, b64(blob))


def test_a_high_s_p256_signature_is_accepted_because_phones_do_not_normalise_s() -> None:
    payload = text()
    r, s = decode_dss_signature(DER.sign_bytes(payload))
    flipped = P256_ORDER - s
    verify_decision("p256", DER.public_key, payload, b64(encode_dss_signature(r, flipped)))
    verify_decision("p256", DER.public_key, payload, b64(r.to_bytes(32, "big") + flipped.to_bytes(32, "big")))


# --- what is refused: the signed content differs ---------------------------------------------------

OTHER_ARGUMENTS = {**ARGUMENTS, "text": "Até amanhã"}
OTHER_PREVIEW = {"kind": "sms_send", "fields": [{"label": "To", "value": "+351 912 345 679"}]}


@pytest.mark.parametrize(
    "change",
    [
        {"decision": "denied"},
        {"approval_id": "apr_ffffffffffffffffffffffffffffffff"},
        {"action_sha256": action_sha256(TOOL, DEVICE, CAPABILITY, OTHER_ARGUMENTS, PREVIEW)},
        {"action_sha256": action_sha256(TOOL, DEVICE, CAPABILITY, ARGUMENTS, OTHER_PREVIEW)},
        {"challenge": "ffeeddccbbaa99887766554433221100"},
        {"expires": FIELDS["expires"] + 3600},
        {"kind": "phone_action"},
        {"subject": "desk-lamp"},
        {"format": "other-approval-v1"},
    ],
    ids=[
        "other-decision",
        "other-approval",
        "changed-arguments",
        "changed-preview",
        "other-challenge",
        "later-expiry",
        "other-kind",
        "other-subject",
        "other-format",
    ],
)
def test_a_signature_is_refused_for_anything_but_what_was_signed(
    signer: Signer, change: dict[str, Any]
) -> None:
    signature = signer.sign(text())
    assert refusal(signer, text(**change), signature) == "bad signature"


def test_a_signature_by_another_key_is_refused_as_from_an_unknown_device(signer: Signer) -> None:
    payload = text()
    stranger = Signer(
        signer.name,
        signer.alg,
        _p256() if signer.alg is KeyAlgorithm.P256 else ed25519.Ed25519PrivateKey.generate(),
        signer.raw,
    )
    assert refusal(signer, payload, stranger.sign(payload)) == "bad signature"


# --- what is refused: the signature is not well formed ---------------------------------------------


def test_an_empty_signature_is_refused(signer: Signer) -> None:
    assert refusal(signer, text(), "") == "empty signature"


@pytest.mark.parametrize(
    ("name", "detail"),
    [("p256-der", "malformed DER"), ("p256-raw", "wrong length"), ("ed25519", "wrong length")],
)
def test_a_truncated_signature_is_refused(name: str, detail: str) -> None:
    signer = next(s for s in SIGNERS if s.name == name)
    payload = text()
    blob = raw_signature_not_starting_like_der(payload) if signer is RAW else signer.sign_bytes(payload)
    assert refusal(signer, payload, b64(blob[:-1])).startswith(detail)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda s: "!" + s[1:],
        lambda s: s[:8] + " " + s[8:],
        lambda s: s + "\n",
        lambda s: " " + s,
        lambda s: s[:4] + "=" + s[4:],
        lambda s: s.rstrip("=") + "===",
        lambda s: s[:5] + "Á" + s[6:],
    ],
    ids=[
        "bad-character",
        "inner-space",
        "trailing-newline",
        "leading-space",
        "inner-padding",
        "too-much-padding",
        "non-ascii",
    ],
)
def test_a_signature_that_is_not_strict_base64_is_refused(
    signer: Signer, mangle: Callable[[str], str]
) -> None:
    payload = text()
    signature = signer.sign(payload)
    assert refusal(signer, payload, mangle(signature)).startswith("not base64")


@pytest.mark.parametrize(
    "value",
    ["ab+_", "AB=", "AB==", "A", "QUJD\tREVG"],
    ids=["mixed-alphabets", "short-padding", "stray-bits", "impossible-length", "tab"],
)
def test_mixed_alphabets_wrong_padding_stray_bits_and_impossible_lengths_are_not_base64(value: str) -> None:
    assert refusal(ED25519, text(), value).startswith("not base64")


def test_one_signature_verifies_with_all_or_none_of_its_padding_and_is_refused_with_part_of_it() -> None:
    payload = text()
    whole = ED25519.sign(payload)  # 64 bytes: 86 characters and two '='
    assert whole.endswith("==") and not whole.endswith("===")
    verify_decision(ED25519.alg, ED25519.public_key, payload, whole)
    verify_decision(ED25519.alg, ED25519.public_key, payload, whole.rstrip("="))
    assert refusal(ED25519, payload, whole[:-1]) == "not base64: wrong padding"


def test_a_long_signature_is_refused_before_it_is_decoded(signer: Signer) -> None:
    assert refusal(signer, text(), "A" * 400) == "too long"


def test_trailing_bytes_after_a_der_signature_are_refused() -> None:
    payload = text()
    blob = DER.sign_bytes(payload)
    assert refusal(DER, payload, b64(blob + b"\x00")) == "trailing bytes after the DER signature"
    assert refusal(DER, payload, b64(blob + blob)) == "trailing bytes after the DER signature"


def test_a_der_signature_whose_declared_part_does_not_parse_is_malformed_not_trailing() -> None:
    payload = text()
    # declares 2 bytes of content, an INTEGER of length 0, then a stray byte: nothing parses
    assert refusal(DER, payload, b64(b"\x30\x02\x02\x00\x00")) == "malformed DER"


# A SEQUENCE of two 62-byte INTEGERs: 131 bytes, its length in DER's long form (0x81 0x80).
LONG_FORM_DER = bytes.fromhex("308180023e") + b"\x11" * 62 + bytes.fromhex("023e") + b"\x22" * 62


@pytest.mark.parametrize(
    ("blob", "detail"),
    [
        (b"\x30", "malformed DER"),
        (b"\x30\x00", "malformed DER"),
        (b"\x30\x00\x00", "malformed DER"),
        (b"\x30\x80\x02\x01\x01\x02\x01\x01\x00\x00", "malformed DER"),
        (LONG_FORM_DER[:-1], "malformed DER"),
        (LONG_FORM_DER, "bad signature"),
        (LONG_FORM_DER + b"\x00", "trailing bytes after the DER signature"),
    ],
    ids=[
        "tag-only",
        "empty-sequence",
        "empty-sequence-and-a-byte",
        "indefinite-length",
        "long-form-cut",
        "long-form",
        "long-form-and-a-byte",
    ],
)
def test_a_signature_that_starts_like_der_is_refused_for_what_it_is(blob: bytes, detail: str) -> None:
    assert refusal(DER, text(), b64(blob)) == detail


def test_json_that_has_no_single_form_is_refused_on_the_json_field_with_the_reason() -> None:
    with pytest.raises(InvalidInput) as refused:
        canonical_json({1: "a"})
    assert (refused.value.field, refused.value.message) == (
        "json",
        "A JSON object key must be a string, not 1.",
    )
    with pytest.raises(InvalidInput) as refused:
        canonical_json({"a": float("nan")})
    assert (refused.value.field, refused.value.message) == (
        "json",
        "The value cannot be canonical JSON: Out of range float values are not JSON compliant.",
    )


def test_a_signature_of_the_longest_allowed_length_is_read_and_refused_for_what_it_holds() -> None:
    assert refusal(DER, text(), "A" * 200) == (
        "wrong length: 150 bytes are neither a DER signature nor a 64-byte r‖s"
    )
    assert refusal(DER, text(), "A" * 201) == "too long"


def test_four_characters_of_base64_are_refused_for_their_length_not_their_padding() -> None:
    assert (
        refusal(DER, text(), "AAAA") == "wrong length: 3 bytes are neither a DER signature nor a 64-byte r‖s"
    )


def test_a_payload_that_is_not_utf8_text_is_refused_as_such() -> None:
    assert refusal(DER, "\ud800", DER.sign(text())) == "payload is not UTF-8 text"


def test_a_p256_key_signs_in_der_unless_raw_is_asked_for() -> None:
    blob = base64.b64decode(sign_decision(DER.key, text()))
    assert blob[:1] == b"\x30" and decode_dss_signature(blob)


def test_an_r_s_signature_that_starts_like_der_still_verifies() -> None:
    # r's first byte is 0x30, the DER tag, about once in 256 signatures
    for attempt in range(5000):
        payload = text() + str(attempt)
        blob = RAW.sign_bytes(payload)
        if blob[0] == 0x30:
            verify_decision(RAW.alg, RAW.public_key, payload, b64(blob))
            return
    pytest.fail("no r‖s signature starting with 0x30 in 5000 tries")


def test_a_der_signature_whose_base64_ends_in_x_verifies() -> None:
    # 96 characters, no padding: stripping padding must strip '=' only
    for attempt in range(20000):
        payload = text() + str(attempt)
        signature = DER.sign(payload)
        if len(signature) == 96 and signature.endswith("X"):
            verify_decision(DER.alg, DER.public_key, payload, signature)
            return
    pytest.fail("no DER signature ending in X in 20000 tries")


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"decision": "maybe"}, "decision", "decision must be 'approved' or 'denied'."),
        ({"action_sha256": "AB"}, "action_sha256", "action_sha256 must be 64 lower-case hex digits."),
        ({"challenge": "xyz"}, "challenge", "challenge must be 32 lower-case hex digits."),
        ({"expires": "soon"}, "expires", "expires must be a whole number of seconds since the epoch."),
        ({"approval_id": 5}, "approval_id", "approval_id must be text."),
        ({"approval_id": ""}, "approval_id", "approval_id must not be empty."),
    ],
)
def test_a_signed_text_field_out_of_shape_is_refused_with_its_sentence(
    changes: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        text(**changes)
    assert (refused.value.field, refused.value.message) == (field, message)


def test_a_non_minimal_der_signature_is_refused() -> None:
    payload = text()
    blob = DER.sign_bytes(payload)
    r, s = decode_dss_signature(blob)
    r_bytes = r.to_bytes((r.bit_length() + 8) // 8, "big")  # minimal: a leading zero only before a high bit
    s_bytes = s.to_bytes((s.bit_length() + 8) // 8, "big")
    assert der(r_bytes, s_bytes) == blob
    leading_zero_r = der(b"\x00" + r_bytes, s_bytes)
    body = der(r_bytes, s_bytes)[2:]
    long_form_length = bytes([0x30, 0x81, len(body)]) + body
    long_form_integer = (
        bytes([0x30, len(body) + 1, 2, 0x81, len(r_bytes)]) + r_bytes + body[2 + len(r_bytes) :]
    )
    for stretched in (leading_zero_r, long_form_length, long_form_integer):
        assert refusal(DER, payload, b64(stretched)) == "malformed DER"


def test_a_negative_der_integer_is_refused() -> None:
    payload = text()
    r, s = decode_dss_signature(DER.sign_bytes(payload))
    r_bytes = r.to_bytes((r.bit_length() + 8) // 8, "big")
    negative_s = (-s).to_bytes((s.bit_length() + 8) // 8, "big", signed=True)
    assert refusal(DER, payload, b64(der(r_bytes, negative_s))) == "malformed DER"


@pytest.mark.parametrize("size", [63, 65])
def test_a_raw_p256_signature_must_be_64_bytes(size: int) -> None:
    payload = text()
    blob = (raw_signature_not_starting_like_der(payload) + b"\x01")[:size]
    assert refusal(RAW, payload, b64(blob)).startswith("wrong length")


@pytest.mark.parametrize("size", [63, 65])
def test_an_ed25519_signature_must_be_64_bytes(size: int) -> None:
    payload = text()
    blob = (ED25519.sign_bytes(payload) + b"\x01")[:size]
    assert refusal(ED25519, payload, b64(blob)).startswith("wrong length")


def test_a_raw_p256_signature_with_r_or_s_out_of_range_is_refused() -> None:
    payload = text()
    blob = RAW.sign_bytes(payload)
    order = P256_ORDER.to_bytes(32, "big")
    zero = bytes(32)
    for forged in (zero + zero, zero + blob[32:], blob[:32] + zero, order + blob[32:], blob[:32] + order):
        assert refusal(RAW, payload, b64(forged)) == "bad signature"


def test_an_all_zero_ed25519_signature_is_refused() -> None:
    assert refusal(ED25519, text(), b64(bytes(64))) == "bad signature"


def test_a_signature_checked_under_the_wrong_algorithm_is_refused() -> None:
    payload = text()
    with pytest.raises(SignatureRefused) as refused:
        verify_decision("p256", ED25519.key.public_key(), payload, ED25519.sign(payload))
    assert refused.value.detail == "the key is not a p256 key"
    with pytest.raises(SignatureRefused) as refused:
        verify_decision("ed25519", DER.public_key, payload, DER.sign(payload))
    assert refused.value.detail.startswith("public key:")
    with pytest.raises(SignatureRefused) as refused:
        verify_decision("rsa", DER.public_key, payload, DER.sign(payload))
    assert refused.value.detail == "unknown algorithm 'rsa'"


def test_every_refusal_tells_the_client_the_same_thing_and_keeps_the_reason_for_the_journal() -> None:
    payload = text()
    refusals = []
    for signature in (
        "",
        "!!",
        b64(bytes(10)),
        b64(DER.sign_bytes(payload) + b"\x00"),
        DER.sign(text(decision="denied")),
    ):
        with pytest.raises(SignatureRefused) as refused:
            verify_decision("p256", DER.public_key, payload, signature)
        refusals.append(refused.value)
    assert len({e.detail for e in refusals}) == len(refusals)
    for e in refusals:
        assert isinstance(e, Forbidden) and e.code == "signature_refused"
        assert str(e) == e.message == "The signature does not verify for this approval and decision."
        assert e.detail not in str(e)


# --- the signed text -------------------------------------------------------------------------------


def test_the_signed_text_is_eight_lines_each_ending_in_a_newline() -> None:
    assert text() == (
        "tapgate-approval-v1\n"
        "approval: apr_0f1e2d3c4b5a69788796a5b4c3d2e1f0\n"
        "decision: approved\n"
        "kind: sms_send\n"
        "subject: ana-phone\n"
        f"action-sha256: {ACTION}\n"
        "challenge: 00112233445566778899aabbccddeeff\n"
        "expires: 1796040000\n"
    )


def test_an_empty_subject_keeps_the_space_after_its_colon() -> None:
    assert "\nsubject: \naction-sha256: " in text(subject="")


def test_the_format_name_is_the_first_line_whatever_it_is() -> None:
    assert text(format="other-approval-v1").startswith("other-approval-v1\napproval: ")


TEXT_FIELDS = ["format", "approval_id", "decision", "kind", "subject", "action_sha256", "challenge"]
FORGERS = ["\n", "\r", "\u2028", "\u2029", "\x85", "\v", "\u202e", "\u200b", "\x00"]


@pytest.mark.parametrize("field", TEXT_FIELDS)
@pytest.mark.parametrize("forger", FORGERS, ids=[f"U+{ord(c):04X}" for c in FORGERS])
def test_no_field_can_hold_a_line_break_or_a_control_format_or_bidi_character(
    field: str, forger: str
) -> None:
    value = FIELDS[field]
    with pytest.raises(InvalidInput, match=f"U\\+{ord(forger):04X}") as refused:
        text(**{field: value[:4] + forger + value[4:]})
    assert refused.value.field == field


def test_a_forged_line_cannot_reach_the_signed_text() -> None:
    with pytest.raises(InvalidInput) as refused:
        text(subject="ana-phone\ndecision: approved")
    assert refused.value.field == "subject"


@pytest.mark.parametrize("decision", ["yes", "Approved", "approved ", ""])
def test_the_decision_is_approved_or_denied(decision: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        text(decision=decision)
    assert refused.value.field == "decision"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("action_sha256", ACTION.upper()),
        ("action_sha256", ACTION[:-1]),
        ("challenge", "00112233445566778899AABBCCDDEEFF"),
        ("challenge", "0011223344556677"),
        ("expires", -1),
        ("expires", True),
        ("expires", "1796040000"),
        ("format", ""),
        ("approval_id", ""),
        ("kind", ""),
        ("subject", None),
    ],
)
def test_a_field_of_the_wrong_shape_is_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        text(**{field: value})
    assert refused.value.field == field


_line = st.text(
    st.characters(
        exclude_categories=("Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"),
        exclude_characters="\u115f\u1160\u3164\uffa0\u2800",
    )
    | st.sampled_from(":- "),
    max_size=12,
)
_approvals = st.tuples(
    _line.filter(bool),
    _line.filter(bool),
    st.sampled_from(["approved", "denied"]),
    _line.filter(bool),
    _line,
    st.text("0123456789abcdef", min_size=64, max_size=64),
    st.text("0123456789abcdef", min_size=32, max_size=32),
    st.integers(min_value=0, max_value=2**40),
)


def _shift_boundary(fields: tuple[Any, ...], at: int, size: int) -> tuple[Any, ...]:
    """Move the last ``size`` characters of free-text field ``at`` to the front of the next free-text field:
    the classic way two different records concatenate to the same text."""
    free = [0, 1, 3, 4]
    left, right = free[at], free[at + 1]
    moved = list(fields)
    cut = len(moved[left]) - min(size, len(moved[left]) - 1)
    moved[left], moved[right] = moved[left][:cut], moved[left][cut:] + moved[right]
    return tuple(moved)


@given(_approvals, _approvals, st.integers(0, 2), st.integers(1, 5))
def test_no_two_distinct_approvals_share_a_signed_text(
    first: tuple[Any, ...], second: tuple[Any, ...], at: int, size: int
) -> None:
    neighbour = _shift_boundary(first, at, size)
    for other in (second, neighbour):
        if other != first:
            assert signed_text(*first) != signed_text(*other)


@given(_approvals)
def test_the_signed_text_reads_back_to_exactly_the_fields_it_was_built_from(fields: tuple[Any, ...]) -> None:
    lines = signed_text(*fields).split("\n")
    assert len(lines) == 9 and lines[-1] == ""
    labels = [
        "approval: ",
        "decision: ",
        "kind: ",
        "subject: ",
        "action-sha256: ",
        "challenge: ",
        "expires: ",
    ]
    values = [lines[0]] + [line.removeprefix(label) for line, label in zip(lines[1:8], labels, strict=True)]
    assert all(line.startswith(label) for line, label in zip(lines[1:8], labels, strict=True))
    assert (*values[:7], int(values[7])) == fields


# --- the planned action's hash and the sign block ---------------------------------------------------


def test_the_action_hash_is_sha256_of_the_canonical_planned_action_with_its_five_key_names() -> None:
    preview = hashlib.sha256(
        b'{"fields":[{"label":"To","value":"+351 912 345 678"}],"kind":"sms_send"}'
    ).hexdigest()
    planned = (
        '{"arguments":{"text":"Até já","to":"+351912345678"},"capability":"sms_send","device":"ana-phone",'
        f'"preview_sha256":"{preview}","tool":"device__ana_phone__sms_send"}}'
    )
    assert preview_sha256(PREVIEW) == preview
    assert hashlib.sha256(planned.encode("utf-8")).hexdigest() == ACTION


def test_canonical_json_sorts_keys_drops_spaces_and_keeps_non_ascii_as_utf8() -> None:
    assert (
        canonical_json({"b": [1, True, None], "a": {"ñ": "👋"}})
        == '{"a":{"ñ":"👋"},"b":[1,true,null]}'.encode()
    )


@pytest.mark.parametrize(
    "value",
    [{"x": float("nan")}, {1: "one"}, {"x": {None: 1}}, {"x": "\ud800"}, {"x": object()}],
    ids=["nan", "int-key", "none-key", "lone-surrogate", "object"],
)
def test_canonical_json_refuses_what_has_no_single_json_form(value: object) -> None:
    with pytest.raises(InvalidInput):
        canonical_json(value)


def test_an_object_with_a_non_string_key_inside_a_list_cannot_hash_like_its_string_keyed_twin() -> None:
    assert canonical_json([{"1": "a"}]) == b'[{"1":"a"}]'
    with pytest.raises(InvalidInput, match="key must be a string"):
        canonical_json([{1: "a"}])
    with pytest.raises(InvalidInput, match="key must be a string"):
        action_sha256(TOOL, DEVICE, CAPABILITY, {"to": [{1: "a"}]}, PREVIEW)


def test_the_action_hash_changes_with_every_part_and_not_with_key_order() -> None:
    hashes = {
        ACTION,
        action_sha256("device__ana_phone__sms_sendx", DEVICE, CAPABILITY, ARGUMENTS, PREVIEW),
        action_sha256(TOOL, "ana-tablet", CAPABILITY, ARGUMENTS, PREVIEW),
        action_sha256(TOOL, DEVICE, "phone_action", ARGUMENTS, PREVIEW),
        action_sha256(TOOL, DEVICE, CAPABILITY, OTHER_ARGUMENTS, PREVIEW),
        action_sha256(TOOL, DEVICE, CAPABILITY, ARGUMENTS, OTHER_PREVIEW),
    }
    assert len(hashes) == 6
    reordered = dict(reversed(list(ARGUMENTS.items())))
    assert action_sha256(TOOL, DEVICE, CAPABILITY, reordered, PREVIEW) == ACTION


def test_a_sign_block_carries_a_fresh_challenge_and_expires_ttl_seconds_after_now() -> None:
    first, second = new_sign_block(ACTION, NOW, 3600), new_sign_block(ACTION, NOW, 3600)
    assert first.challenge != second.challenge and len(first.challenge) == 32
    int(first.challenge, 16)
    assert first.expires_at == int(NOW.timestamp()) + 3600
    assert first.as_json() == {
        "format": "tapgate-approval-v1",
        "challenge": first.challenge,
        "expires_at": first.expires_at,
        "action_sha256": ACTION,
        "algorithms": ["p256", "ed25519"],
    }
    assert new_sign_block(ACTION, NOW, 60, format="other-approval-v1").format == "other-approval-v1"
    text(challenge=first.challenge, expires=first.expires_at)


@pytest.mark.parametrize(
    ("now", "ttl", "why"),
    [
        (datetime(2026, 11, 30, 12, 0), 3600, "now must be timezone-aware"),
        (NOW, 0, "ttl_seconds must be a positive integer"),
        (NOW, -5, "ttl_seconds must be a positive integer"),
        (NOW, "60", "ttl_seconds must be a positive integer"),
        (NOW, True, "ttl_seconds must be a positive integer"),
        (NOW, 1.5, "ttl_seconds must be a positive integer"),
    ],
)
def test_a_sign_block_needs_an_aware_clock_and_a_positive_ttl(now: datetime, ttl: object, why: str) -> None:
    with pytest.raises(ValueError, match=f"^{why}$"):
        new_sign_block(ACTION, now, ttl)  # type: ignore[arg-type]


def test_a_sign_block_may_live_one_second() -> None:
    assert new_sign_block(ACTION, NOW, 1).expires_at == int(NOW.timestamp()) + 1


# --- the vectors file ------------------------------------------------------------------------------


def committed_vectors() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
    return doc


def test_the_committed_vectors_file_checks() -> None:
    doc = committed_vectors()
    assert doc["format"] == "tapgate-approval-v1"
    assert check_vectors(doc) == 4
    assert {(c["alg"], c["decision"], "signature_raw" in c) for c in doc["cases"]} == {
        ("p256", "approved", True),
        ("p256", "denied", True),
        ("ed25519", "approved", False),
        ("ed25519", "denied", False),
    }


def test_a_freshly_generated_vectors_document_checks() -> None:
    doc = generate_vectors(NOW)
    assert check_vectors(json.loads(json.dumps(doc))) == 4
    if os.environ.get("TAPGATE_REGENERATE_VECTORS"):
        VECTORS_FILE.parent.mkdir(exist_ok=True)
        VECTORS_FILE.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def test_vectors_under_another_format_name_check() -> None:
    doc = generate_vectors(NOW, format="other-approval-v1")
    assert all(case["payload"].startswith("other-approval-v1\n") for case in doc["cases"])
    assert check_vectors(doc) == 4


def test_vectors_relabelled_with_another_format_name_fail() -> None:
    doc = committed_vectors()
    doc["format"] = doc["sign"]["format"] = "other-approval-v1"
    with pytest.raises(VectorsError, match="payload is not the text rebuilt") as failed:
        check_vectors(doc)
    assert failed.value.case == 0


def _flip_one_byte(signature: str) -> str:
    blob = bytearray(base64.b64decode(signature))
    blob[len(blob) // 2] ^= 0x01
    return b64(bytes(blob))


def _flip_one_payload_character(payload: str) -> str:
    at = payload.index("challenge: ") + len("challenge: ")
    return payload[:at] + ("1" if payload[at] == "0" else "0") + payload[at + 1 :]


_CHANGES = {
    "payload": _flip_one_payload_character,
    "signature": _flip_one_byte,
    "signature_raw": _flip_one_byte,
}


@pytest.mark.parametrize(
    ("index", "field"),
    [(i, f) for i in range(4) for f in ("payload", "signature")]
    + [(0, "signature_raw"), (1, "signature_raw")],
)
def test_vectors_with_one_byte_changed_fail_at_that_case(index: int, field: str) -> None:
    doc = committed_vectors()
    case = doc["cases"][index]
    case[field] = _CHANGES[field](case[field])
    with pytest.raises(VectorsError, match=f"^case {index}: ") as failed:
        check_vectors(doc)
    assert failed.value.case == index
    assert field in failed.value.why


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("sign", "challenge"), "ffeeddccbbaa99887766554433221100"),
        (("sign", "expires_at"), 1),
        (("approval", "id"), "apr_other"),
        (("approval", "subject"), ""),
    ],
)
def test_vectors_whose_approval_or_sign_fields_changed_fail_at_the_first_case(
    path: tuple[str, str], value: object
) -> None:
    doc = committed_vectors()
    doc[path[0]][path[1]] = value
    with pytest.raises(VectorsError) as failed:
        check_vectors(doc)
    assert failed.value.case == 0


def test_vectors_whose_planned_action_or_preview_changed_fail() -> None:
    doc = committed_vectors()
    doc["approval"]["planned_action"]["arguments"]["text"] += "!"
    with pytest.raises(VectorsError, match="planned action") as failed:
        check_vectors(doc)
    assert failed.value.case is None
    doc = committed_vectors()
    doc["approval"]["preview"]["fields"][0]["value"] += "!"
    with pytest.raises(VectorsError, match="preview"):
        check_vectors(doc)


def test_a_case_signed_for_the_other_decision_fails() -> None:
    doc = committed_vectors()
    doc["cases"][1]["signature"] = doc["cases"][0]["signature"]
    with pytest.raises(VectorsError, match="signature does not verify: bad signature") as failed:
        check_vectors(doc)
    assert failed.value.case == 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d.pop("cases"),
        lambda d: d.update(cases=[]),
        lambda d: d["sign"].pop("challenge"),
        lambda d: d["approval"].pop("id"),
        lambda d: d.update(format="something-else"),
        lambda d: d["sign"].update(algorithms="p256,ed25519"),
        lambda d: d["cases"][2].pop("public_key"),
        lambda d: d["cases"][3].update(alg="rsa"),
    ],
    ids=[
        "no-cases",
        "empty-cases",
        "no-challenge",
        "no-id",
        "formats-differ",
        "algorithms-text",
        "no-key",
        "rsa",
    ],
)
def test_an_incomplete_vectors_document_fails_and_says_where(
    damage: Callable[[dict[str, Any]], object],
) -> None:
    doc = copy.deepcopy(committed_vectors())
    damage(doc)
    with pytest.raises(VectorsError):
        check_vectors(doc)
