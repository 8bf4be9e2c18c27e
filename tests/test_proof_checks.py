"""The verifier's checks one at a time: each way a proof can be wrong is refused with the sentence that
names the check that failed, on proofs that pass every other check (re-signed by the issuer, and by the
device where the signed text changes). Mandate and call proofs are built here in the domain, with the
sentence each one says, and what the builder puts in a proof, claim by claim."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from tapgate.domain.approvals import (
    action_sha256,
    canonical_json,
    new_sign_block,
    preview_sha256,
    sign_decision,
    signed_text,
)
from tapgate.domain.errors import ProofRefused, SignatureRefused
from tapgate.domain.inbox import Approval, ApprovalStatus
from tapgate.domain.invocations import Invocation, Status
from tapgate.domain.keys import KeyAlgorithm, canonical_public_key
from tapgate.domain.proofs import (
    Issued,
    IssuerKey,
    SignedDecision,
    Signer,
    approval_proof,
    call_proof,
    device_jwk,
    disclosure,
    disclosure_digest,
    jwks,
    new_issuer_key,
    new_salt,
    thumbprint,
    verify,
    when,
)
from tests import independent_verifier

NOW = datetime(2026, 12, 5, 14, 2, 7, tzinfo=UTC)
AT = "14:02 UTC on 5 Dec 2026"
# RFC 8037 appendix A.1's Ed25519 key and (A.3) its thumbprint: the issuer of every proof here.
RFC8037_KEY = {
    "kty": "OKP",
    "crv": "Ed25519",
    "d": "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A",
    "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
}
KID = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
ISSUER = IssuerKey(KID, json.dumps(RFC8037_KEY), NOW)
KEYS = jwks([ISSUER])
PUBLISHED = KEYS["keys"][0]
DEVICE = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
P256_DEVICE = ec.derive_private_key(0x5EED, ec.SECP256R1())
HEADER = {"alg": "EdDSA", "typ": "dc+sd-jwt", "kid": KID}

SMS_TOOL = "device__ana_phone__sms_send"
SMS = {"to": "+447700900123", "body": "Running late, back at 7"}
PREVIEW = {"kind": "sms_send", "fields": [{"label": "To", "value": "+447700900123"}]}
LAMP_TOOL = "device__desk_lamp__lamp_set"
ALARM_TOOL = "device__ana_phone__alarm_set"
LAMP = {"on": True, "brightness": 40}
BOUNDS = {
    "mandate_id": "mnd-1",
    "user_id": "ana",
    "agent_id": "assistant",
    "tools": [LAMP_TOOL, ALARM_TOOL],
    "constraints": {"brightness": {"max": 60}},
    "max_calls": 3,
    "per_day": None,
    "expires_at": "2026-12-12T18:00:00Z",
    "purpose": "the evening lights",
}
SMS_SENTENCE = f"ana's device ana-phone approved sms_send to +44…, {AT}, all 2 arguments disclosed"
MANDATE_SENTENCE = (
    f"ana's device ana-phone approved mandate mnd-1 for {LAMP_TOOL}, {ALARM_TOOL} (at most 3 calls), {AT}"
)
CALL_SENTENCE = (
    f"assistant called {LAMP_TOOL} on desk-lamp, {AT}, under mandate mnd-1, which ana's device ana-phone "
    f"approved at {AT}; all 2 arguments disclosed"
)

Device = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64json(value: object) -> str:
    return _b64url(json.dumps(value).encode())


def _signer(salt: Callable[[], str] = new_salt) -> Signer:
    return Signer(Issued("https://gw.test", ISSUER, NOW), salt)


def _decided(
    kind: str = "sms_send",
    subject: str = "ana-phone",
    tool: str = SMS_TOOL,
    arguments: Mapping[str, Any] = SMS,
    status: ApprovalStatus = ApprovalStatus.APPROVED,
    user: str = "ana",
) -> Approval:
    sign = new_sign_block(action_sha256(tool, subject, kind, arguments, PREVIEW), NOW, 3600)
    return Approval(
        tenant_id="t1",
        approval_id="apr-1",
        user_id=user,
        agent_id="assistant",
        invocation_id="call-1",
        kind=kind,
        subject=subject,
        prompt="assistant asks",
        preview=PREVIEW,
        sign=sign,
        binding_code="ACDE",
        status=status,
        created_at=NOW,
        expires_at=NOW,
        decided_at=NOW,
        decided_by="device:ana-phone",
        tool=tool,
        arguments=arguments,
    )


def _text(approval: Approval) -> str:
    sign = approval.sign
    return signed_text(
        sign.format,
        approval.approval_id,
        approval.status.value,
        approval.kind,
        approval.subject,
        sign.action_sha256,
        sign.challenge,
        sign.expires_at,
    )


def _signed(approval: Approval, private: Device = DEVICE, raw: bool = False) -> SignedDecision:
    alg = KeyAlgorithm.ED25519 if isinstance(private, ed25519.Ed25519PrivateKey) else KeyAlgorithm.P256
    public = canonical_public_key(private.public_key())
    return SignedDecision(
        "apr-1", "ana-phone", alg.value, public, sign_decision(private, _text(approval), raw)
    )


def _approval_proof(
    arguments: Mapping[str, Any] = SMS, disclose: bool = True, private: Device = DEVICE
) -> str:
    approval = _decided(arguments=arguments)
    return approval_proof(_signer(), approval, _signed(approval, private), (41, "ab" * 32), disclose)


def _mandate_proof(
    bounds: Mapping[str, Any] = BOUNDS,
    status: ApprovalStatus = ApprovalStatus.APPROVED,
    kind: str = "mandate",
    user: str = "ana",
) -> str:
    approval = _decided(kind, "mnd-1", "mandate", bounds, status, user)
    return approval_proof(_signer(), approval, _signed(approval), (7, "cd" * 32), False, mandate=True)


def _invocation(**changes: Any) -> Invocation:
    fields: dict[str, Any] = {
        "tenant_id": "t1",
        "invocation_id": "call-9",
        "user_id": "ana",
        "agent_id": "assistant",
        "device_uid": "uid-lamp",
        "device_id": "desk-lamp",
        "tool": LAMP_TOOL,
        "capability": "lamp_set",
        "arguments": LAMP,
        "arguments_sha256": "00" * 32,
        "status": Status.DONE,
        "created_at": NOW,
        "expires_at": NOW,
        "mandate_id": "mnd-1",
    }
    return Invocation(**{**fields, **changes})


def _call_proof(mandate: str | None = None, disclose: bool = True, **changes: Any) -> str:
    inner = _mandate_proof() if mandate is None else mandate
    return call_proof(_signer(), _invocation(**changes), inner, (52, "ef" * 32), disclose)


def _claims(proof: str) -> dict[str, Any]:
    body = proof.split("~")[0].split(".")[1]
    claims: dict[str, Any] = json.loads(_unb64url(body))
    return claims


def _reissued(
    proof: str,
    change: Callable[[dict[str, Any]], object] = lambda c: None,
    disclosures: list[str] | None = None,
) -> str:
    """``proof`` with its claims changed by ``change`` and signed again by the issuer, so that only the
    change is wrong; with ``disclosures``, those instead of its own."""
    claims = _claims(proof)
    change(claims)
    jwt = _signer().sign(str(claims.get("vct")), str(claims.get("sub")), claims, None, True).split("~")[0]
    kept = proof.split("~")[1:-1] if disclosures is None else disclosures
    return "~".join([jwt, *kept]) + "~"


def _device_signs(text: str, private: Device = DEVICE) -> Callable[[dict[str, Any]], None]:
    """A change that puts ``text`` in the proof as the signed text, signed by the device: only the text
    is wrong, never its signature."""

    def change(claims: dict[str, Any]) -> None:
        if isinstance(private, ed25519.Ed25519PrivateKey):
            signature = private.sign(text.encode())
        else:
            r, s = decode_dss_signature(private.sign(text.encode(), ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        claims["approval"]["signed_text"] = text
        claims["approval"]["signature"] = _b64url(signature)

    return change


def _compact(head64: str, body64: str, issuer: ed25519.Ed25519PrivateKey | None = None) -> str:
    """A compact JWS over exactly these two parts, signed by the issuer (or ``issuer``)."""
    key = issuer or ed25519.Ed25519PrivateKey.from_private_bytes(_unb64url(str(RFC8037_KEY["d"])))
    return f"{head64}.{body64}.{_b64url(key.sign(f'{head64}.{body64}'.encode()))}"


def _refusal(proof: object, keys: Mapping[str, Any] = KEYS) -> str:
    with pytest.raises(ProofRefused) as refused:
        verify(proof, keys)  # type: ignore[arg-type]
    return refused.value.message


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    """A change that sets the claim at the dotted ``path`` (or deletes it, for ``...``)."""

    def change(claims: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        holder = claims
        for name in parents:
            holder = holder[name]
        if value is ...:
            del holder[last]
        else:
            holder[last] = value

    return change


# ---- what a proof that verifies says ----------------------------------------------------------------


@pytest.mark.parametrize("private", [DEVICE, P256_DEVICE], ids=["ed25519", "p256"])
def test_an_approval_proof_verifies_and_says_who_decided_what_and_when(private: Device) -> None:
    proven = verify(_approval_proof(private=private), KEYS)
    assert (proven.vct, proven.sentence) == ("tapgate-approval-v1", SMS_SENTENCE)
    assert (proven.arguments, proven.hidden) == (SMS, 0)
    assert proven.claims["journal"] == {"seq": 41, "hash": "ab" * 32}


def test_a_proof_with_whitespace_around_it_verifies() -> None:
    assert verify(f" \n{_approval_proof()}\n\n", KEYS).sentence == SMS_SENTENCE


@pytest.mark.parametrize(
    ("arguments", "ending"),
    [
        ({"to": "+44"}, "approved sms_send to +44, {AT}, all 1 argument disclosed"),
        ({"to": "+447"}, "approved sms_send to +44…, {AT}, all 1 argument disclosed"),
        ({"to": 12345}, "approved sms_send to 123…, {AT}, all 1 argument disclosed"),
        ({"body": "hi"}, "approved sms_send, {AT}, all 1 argument disclosed"),
        ({}, "approved sms_send, {AT}, no arguments"),
    ],
)
def test_the_sentence_shows_the_first_three_characters_of_the_recipient_and_counts_the_arguments(
    arguments: dict[str, Any], ending: str
) -> None:
    proven = verify(_approval_proof(arguments), KEYS)
    assert proven.sentence == "ana's device ana-phone " + ending.format(AT=AT)


@pytest.mark.parametrize(
    ("shown", "ending"),
    [
        (0, "0 of 2 arguments disclosed (the action's hash is checked only with all)"),
        (1, "1 of 2 arguments disclosed (the action's hash is checked only with all)"),
        (2, "all 2 arguments disclosed"),
    ],
)
def test_a_proof_with_arguments_left_out_verifies_and_counts_what_it_hides(shown: int, ending: str) -> None:
    proof = _approval_proof()
    jwt, *disclosures = proof.split("~")[:-1]
    proven = verify("~".join([jwt, *disclosures[:shown]]) + "~", KEYS)
    assert proven.sentence.endswith(f"{AT}, {ending}")
    assert (len(proven.arguments), proven.hidden) == (shown, 2 - shown)


def test_a_proof_of_one_argument_left_out_says_argument_in_the_singular() -> None:
    proof = _approval_proof({"body": "hi"}, disclose=False)
    assert verify(proof, KEYS).sentence.endswith(
        "0 of 1 argument disclosed (the action's hash is checked only with all)"
    )


def test_a_denied_approval_proves_the_denial() -> None:
    approval = _decided(status=ApprovalStatus.DENIED)
    proof = approval_proof(_signer(), approval, _signed(approval), (1, "00" * 32), True)
    assert verify(proof, KEYS).sentence == SMS_SENTENCE.replace("approved", "denied")


def test_an_action_without_arguments_verifies_against_its_own_hash() -> None:
    proof = _approval_proof()
    claims = _claims(proof)
    del claims["action"]["arguments"]
    text = claims["approval"]["signed_text"].replace(
        _decided().sign.action_sha256, hashlib.sha256(canonical_json(claims["action"])).hexdigest()
    )

    def change(c: dict[str, Any]) -> None:
        del c["action"]["arguments"]
        _device_signs(text)(c)

    proven = verify(_reissued(proof, change, []), KEYS)
    assert proven.sentence == f"ana's device ana-phone approved sms_send, {AT}, no arguments"
    assert (proven.arguments, proven.hidden) == ({}, 0)


def test_a_mandate_proof_verifies_and_states_its_tools_and_calls() -> None:
    proven = verify(_mandate_proof(), KEYS)
    assert (proven.vct, proven.sentence) == ("tapgate-mandate-v1", MANDATE_SENTENCE)
    assert (proven.arguments, proven.hidden) == (BOUNDS, 0)
    assert independent_verifier.check(_mandate_proof(), KEYS)["arguments"] == BOUNDS


def test_a_call_under_a_mandate_verifies_and_names_the_mandate_and_who_signed_it() -> None:
    proof = _call_proof()
    proven = verify(proof, KEYS)
    assert (proven.vct, proven.sentence) == ("tapgate-call-v1", CALL_SENTENCE)
    assert (proven.arguments, proven.hidden) == (LAMP, 0)
    assert independent_verifier.check(proof, KEYS)["call"]["id"] == "call-9"


def test_a_call_without_disclosures_verifies_and_says_its_arguments_are_hidden() -> None:
    proven = verify(_call_proof(disclose=False), KEYS)
    assert proven.sentence.endswith(
        "; 0 of 2 arguments disclosed (the action's hash is checked only with all)"
    )
    assert (proven.arguments, proven.hidden) == ({}, 2)


def test_a_mandate_for_any_agent_covers_a_call_by_any_agent() -> None:
    proof = _call_proof(_mandate_proof({**BOUNDS, "agent_id": None}), agent_id="night-bot")
    assert verify(proof, KEYS).sentence.startswith(f"night-bot called {LAMP_TOOL} on desk-lamp, ")


# ---- what the builder puts in a proof ----------------------------------------------------------------


def test_an_approval_proof_carries_the_decision_the_device_key_and_the_planned_action() -> None:
    approval = _decided()
    proof = approval_proof(_signer(lambda: "c2FsdA"), approval, _signed(approval), (41, "ab" * 32), True)
    jwt, *disclosures, end = proof.split("~")
    header = json.loads(_unb64url(jwt.split(".")[0]))
    claims = _claims(proof)
    text = _text(approval)
    assert header == HEADER
    assert end == ""
    assert disclosures == [disclosure("c2FsdA", "body", SMS["body"]), disclosure("c2FsdA", "to", SMS["to"])]
    assert claims == {
        "iss": "https://gw.test",
        "iat": 1796479327,
        "vct": "tapgate-approval-v1",
        "sub": "ana",
        "_sd_alg": "sha-256",
        "cnf": {"jwk": device_jwk("ed25519", canonical_public_key(DEVICE.public_key()))},
        "approval": {
            "id": "apr-1",
            "kind": "sms_send",
            "subject": "ana-phone",
            "decision": "approved",
            "decided_at": "2026-12-05T14:02:07Z",
            "device_id": "ana-phone",
            "signed_text": text,
            "signature": _b64url(DEVICE.sign(text.encode())),
            "alg": "ed25519",
        },
        "action": {
            "tool": SMS_TOOL,
            "device": "ana-phone",
            "capability": "sms_send",
            "preview_sha256": preview_sha256(PREVIEW),
            "arguments": {"_sd": sorted(disclosure_digest(d) for d in disclosures)},
        },
        "journal": {"seq": 41, "hash": "ab" * 32},
    }


def test_a_proof_made_not_to_disclose_carries_only_the_digests() -> None:
    proof = _approval_proof(disclose=False)
    assert proof.count("~") == 1 and proof.endswith("~")
    assert len(_claims(proof)["action"]["arguments"]["_sd"]) == 2


def test_a_mandate_proof_discloses_every_bound_even_when_asked_not_to() -> None:
    approval = _decided("mandate", "mnd-1", "mandate", BOUNDS)
    proof = approval_proof(_signer(), approval, _signed(approval), (7, "cd" * 32), False, mandate=True)
    assert len(proof.split("~")) == len(BOUNDS) + 2
    assert _claims(proof)["vct"] == "tapgate-mandate-v1"


def test_an_approval_without_arguments_still_lists_an_empty_sd() -> None:
    approval = _decided(arguments={})
    proof = approval_proof(_signer(), approval, _signed(approval), (1, "00" * 32), True)
    assert _claims(proof)["action"]["arguments"] == {"_sd": []}


def test_a_call_proof_carries_the_call_its_journal_entry_and_its_mandates_proof() -> None:
    mandate = _mandate_proof()
    proof = call_proof(_signer(lambda: "c2FsdA"), _invocation(), mandate, (52, "ef" * 32), True)
    claims = _claims(proof)
    assert claims == {
        "iss": "https://gw.test",
        "iat": 1796479327,
        "vct": "tapgate-call-v1",
        "sub": "ana",
        "_sd_alg": "sha-256",
        "call": {
            "id": "call-9",
            "agent_id": "assistant",
            "created_at": "2026-12-05T14:02:07Z",
            "mandate_id": "mnd-1",
        },
        "action": {
            "tool": LAMP_TOOL,
            "device": "desk-lamp",
            "capability": "lamp_set",
            "arguments": {
                "_sd": sorted(disclosure_digest(disclosure("c2FsdA", k, v)) for k, v in LAMP.items())
            },
        },
        "journal": {"seq": 52, "hash": "ef" * 32},
        "mandate": {"proof": mandate},
    }
    assert proof.split("~")[1:-1] == [disclosure("c2FsdA", k, LAMP[k]) for k in sorted(LAMP)]


def test_a_proof_is_stamped_with_the_whole_second_it_was_made() -> None:
    signer = Signer(Issued("https://gw.test", ISSUER, NOW + timedelta(microseconds=999_999)))
    assert _claims(signer.sign("x", "ana", {}, None, True))["iat"] == 1796479327


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's local time is three hours ahead of UTC."""
    monkeypatch.setenv("TZ", "TAP-3")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_from_utc")
def test_a_time_in_a_proof_is_written_in_utc_whatever_the_machines_time_zone() -> None:
    assert (
        when(datetime(2026, 12, 5, 15, 2, 7, tzinfo=timezone(timedelta(hours=1)))) == "2026-12-05T14:02:07Z"
    )
    assert when(NOW) == "2026-12-05T14:02:07Z"
    assert verify(_approval_proof(), KEYS).sentence == SMS_SENTENCE


def test_a_salt_is_128_random_bits_in_base64url() -> None:
    salts = {new_salt() for _ in range(8)}
    assert len(salts) == 8
    assert all(len(_unb64url(s)) == 16 and _b64url(_unb64url(s)) == s for s in salts)


def test_a_disclosure_is_rfc_9901s_example_byte_for_byte_with_its_non_ascii_value() -> None:
    assert disclosure("_26bc4LT-ac6q2KI6cBW5es", "family_name", "Möbius") == (
        "WyJfMjZiYzRMVC1hYzZxMktJNmNCVzVlcyIsICJmYW1pbHlfbmFtZSIsICJNw7ZiaXVzIl0"
    )


def test_a_new_issuer_key_is_named_by_its_thumbprint_and_keeps_its_private_half() -> None:
    first, second = new_issuer_key(NOW), new_issuer_key(NOW)
    assert first.kid != second.kid
    assert first.created_at == NOW
    assert first.kid == thumbprint(first.public_jwk) == independent_verifier.thumbprint(first.public_jwk)
    assert set(json.loads(first.private_jwk)) >= {"kty", "crv", "x", "d"}
    assert (first.public_jwk["kty"], first.public_jwk["crv"]) == ("OKP", "Ed25519")
    assert repr(ISSUER) == f"IssuerKey(kid='{KID}', created_at='2026-12-05T14:02:07+00:00')"


def test_the_jwks_lists_every_key_in_order() -> None:
    other = new_issuer_key(NOW)
    assert [k["kid"] for k in jwks([ISSUER, other])["keys"]] == [KID, other.kid]


def test_a_p256_keys_thumbprint_is_rfc_7638s() -> None:
    jwk = device_jwk("p256", canonical_public_key(P256_DEVICE.public_key()))
    assert thumbprint(jwk) == independent_verifier.thumbprint(jwk)


def test_a_key_neither_okp_nor_ec_has_no_thumbprint() -> None:
    with pytest.raises(ProofRefused, match=r"^A key in the JWKS is neither OKP nor EC\.$"):
        thumbprint({"kty": "RSA", "n": "AQAB", "e": "AQAB"})


@pytest.mark.parametrize("private", [DEVICE, P256_DEVICE], ids=["ed25519", "p256"])
def test_a_devices_key_becomes_the_jwk_of_the_same_public_key(private: Device) -> None:
    public = private.public_key()
    jwk = device_jwk(
        "ed25519" if isinstance(private, ed25519.Ed25519PrivateKey) else "p256", canonical_public_key(public)
    )
    if isinstance(public, ed25519.Ed25519PublicKey):
        assert jwk == {"kty": "OKP", "crv": "Ed25519", "x": _b64url(public.public_bytes_raw())}
    else:
        numbers = public.public_numbers()
        assert jwk == {
            "kty": "EC",
            "crv": "P-256",
            "x": _b64url(numbers.x.to_bytes(32, "big")),
            "y": _b64url(numbers.y.to_bytes(32, "big")),
        }


@pytest.mark.parametrize("raw", [False, True], ids=["der", "raw"])
@pytest.mark.parametrize("urlsafe", [False, True], ids=["base64", "base64url"])
def test_a_p256_signature_in_any_encoding_becomes_its_64_byte_r_and_s(raw: bool, urlsafe: bool) -> None:
    approval = _decided()
    text = _text(approval)
    sent = sign_decision(P256_DEVICE, text, raw)
    if urlsafe:
        sent = sent.replace("+", "-").replace("/", "_").rstrip("=")
    signed = SignedDecision(
        "apr-1", "ana-phone", "p256", canonical_public_key(P256_DEVICE.public_key()), sent
    )
    blob = signed.raw_signature(text)
    assert len(blob) == 64
    der = encode_dss_signature(int.from_bytes(blob[:32], "big"), int.from_bytes(blob[32:], "big"))
    P256_DEVICE.public_key().verify(der, text.encode(), ec.ECDSA(hashes.SHA256()))


P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
P256_GX = 0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296


def test_a_p256_signature_whose_der_is_64_bytes_long_is_read_as_der_not_as_r_and_s() -> None:
    """About one DER signature in 2^50 is 64 bytes, the length of r‖s. This one is made so: nonce 1 (so r
    is the generator's x), a short s, and the device key solved for them."""
    approval = _decided()
    text = _text(approval)
    r, s = P256_GX, (1 << 200) + 1
    z = int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")
    private = ec.derive_private_key((s - z) * pow(r, -1, P256_ORDER) % P256_ORDER, ec.SECP256R1())
    der = encode_dss_signature(r, s)
    assert len(der) == 64
    public = canonical_public_key(private.public_key())
    signed = SignedDecision("apr-1", "ana-phone", "p256", public, base64.b64encode(der).decode())
    assert signed.raw_signature(text) == r.to_bytes(32, "big") + s.to_bytes(32, "big")
    proof = approval_proof(_signer(), approval, signed, (41, "ab" * 32), True)
    assert verify(proof, KEYS).sentence == SMS_SENTENCE


@pytest.mark.parametrize("urlsafe", [False, True], ids=["base64", "base64url"])
def test_an_ed25519_signature_in_either_alphabet_is_kept_as_its_64_bytes(urlsafe: bool) -> None:
    payload = "tapgate 0\n"  # the base64 of its signature holds both '+' and '/'
    sent = sign_decision(DEVICE, payload)
    assert "+" in sent and "/" in sent
    if urlsafe:
        sent = sent.replace("+", "-").replace("/", "_").rstrip("=")
    signed = SignedDecision("apr-1", "ana-phone", "ed25519", canonical_public_key(DEVICE.public_key()), sent)
    assert signed.raw_signature(payload) == DEVICE.sign(payload.encode())


def test_a_signature_over_another_text_is_not_put_in_a_proof() -> None:
    signed = _signed(_decided())
    with pytest.raises(SignatureRefused):
        signed.raw_signature("another text\n")


# ---- the checks, one at a time -----------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", "  \n\t"])
def test_an_empty_file_is_refused_as_empty(text: object) -> None:
    assert _refusal(text) == "The file is empty: there is no proof in it."


@pytest.mark.parametrize(
    ("size", "reason"),
    [
        (
            1_000_000,
            "Not an SD-JWT: it must be the issuer-signed JWT and its disclosures, each followed by '~'.",
        ),
        (1_000_001, "The proof is too long to be one of tapgate's."),
    ],
)
def test_a_proof_of_more_than_a_million_characters_is_refused_as_too_long(size: int, reason: str) -> None:
    assert _refusal("x" * size) == reason


@pytest.mark.parametrize("text", ["abc", "abc~def", "a.b.c~d"])
def test_text_that_does_not_end_in_a_tilde_is_not_an_sd_jwt(text: str) -> None:
    assert _refusal(text) == (
        "Not an SD-JWT: it must be the issuer-signed JWT and its disclosures, each followed by '~'."
    )


def test_a_proof_cut_before_its_last_tilde_is_not_an_sd_jwt() -> None:
    assert _refusal(_approval_proof()[:-1]).startswith("Not an SD-JWT: it must be")


@pytest.mark.parametrize("jwt", ["a.b", "a.b.c.d", "abc"])
def test_a_jwt_that_is_not_three_parts_is_not_a_compact_jws(jwt: str) -> None:
    assert _refusal(f"{jwt}~") == "Not an SD-JWT: the part before the first '~' is not a compact JWS."


def _other_spelling(text: str) -> str:
    """``text`` (base64url of a length that leaves spare bits) with its last character spelled so that
    the same bytes decode from it."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    changed = text[:-1] + alphabet[alphabet.index(text[-1]) ^ 1]
    assert _unb64url(changed) == _unb64url(text)
    return changed


def test_an_issuer_signature_spelled_another_way_is_refused() -> None:
    jwt, rest = _approval_proof().split("~", 1)
    head64, body64, sig64 = jwt.split(".")
    respelled = f"{head64}.{body64}.{_other_spelling(sig64)}~{rest}"
    assert _refusal(respelled) == "The issuer's signature is not base64url."


@pytest.mark.parametrize(
    ("head64", "reason"),
    [
        (_b64json(HEADER) + "=", "The JWS header is not base64url."),
        ("", "The JWS header is not base64url."),
        ("a+b", "The JWS header is not base64url."),
        ("a/b", "The JWS header is not base64url."),
        ("a", "The JWS header is not base64url."),
        (_b64url(b"not json"), "The JWS header is not JSON."),
        (_b64url(b'{"alg": "EdDSA"'), "The JWS header is not JSON."),
        (_b64url(b"\xff\xfe"), "The JWS header is not JSON."),
        (_b64json(["EdDSA"]), "The JWS header is not a JSON object."),
        (_b64json({**HEADER, "alg": "ES256"}), "The JWS alg is 'ES256', not EdDSA."),
        (_b64json({"typ": "dc+sd-jwt", "kid": KID}), "The JWS alg is None, not EdDSA."),
        (_b64json({**HEADER, "typ": "JWT"}), "The JWS typ is 'JWT', not dc+sd-jwt."),
        (_b64json({"alg": "EdDSA", "kid": KID}), "The JWS typ is None, not dc+sd-jwt."),
    ],
)
def test_a_jws_header_that_is_not_tapgates_is_refused_with_what_is_wrong(head64: str, reason: str) -> None:
    body64 = _approval_proof().split(".")[1]
    assert _refusal(_compact(head64, body64) + "~") == reason


def test_a_jws_signed_by_another_key_does_not_verify_with_the_named_key() -> None:
    body64 = _approval_proof().split(".")[1]
    forged = _compact(_b64json(HEADER), body64, ed25519.Ed25519PrivateKey.generate())
    assert _refusal(forged + "~") == f"The issuer's signature does not verify with key {KID}."


def test_a_changed_payload_under_the_old_signature_does_not_verify() -> None:
    jwt = _approval_proof().split("~")[0]
    head64, _, sig64 = jwt.split(".")
    assert _refusal(f"{head64}.{_b64json({'vct': 'x'})}.{sig64}~") == (
        f"The issuer's signature does not verify with key {KID}."
    )


@pytest.mark.parametrize(
    ("body64", "reason"),
    [
        (_b64url(b"not json"), "The JWT's payload is not JSON."),
        (_b64url(b"\xff\xfe"), "The JWT's payload is not JSON."),
        (_b64json(["vct"]), "The JWT's payload is not a JSON object."),
        (_other_spelling(_b64json({"vct": "xy"})), "The JWT's payload is not base64url."),
    ],
)
def test_an_issuer_signed_payload_that_is_not_a_claims_object_is_refused(body64: str, reason: str) -> None:
    assert _refusal(_compact(_b64json(HEADER), body64) + "~") == reason


@pytest.mark.parametrize(
    ("keys", "reason"),
    [
        ([PUBLISHED], "The JWKS is not a JWK Set: it has no 'keys' list."),
        ({}, "The JWKS is not a JWK Set: it has no 'keys' list."),
        ({"keys": PUBLISHED}, "The JWKS is not a JWK Set: it has no 'keys' list."),
        (
            {"keys": [{**PUBLISHED, "kid": "other"}]},
            f"The JWKS has no key {KID!r}: it was not signed by these issuer keys.",
        ),
        ({"keys": []}, f"The JWKS has no key {KID!r}: it was not signed by these issuer keys."),
        ({"keys": [{**PUBLISHED, "kty": "EC"}]}, f"The JWKS key {KID} is not an Ed25519 key."),
        ({"keys": [{**PUBLISHED, "crv": "X25519"}]}, f"The JWKS key {KID} is not an Ed25519 key."),
        (
            {"keys": [{k: v for k, v in PUBLISHED.items() if k != "x"}]},
            f"The JWKS key {KID} is not a valid Ed25519 key.",
        ),
        ({"keys": [{**PUBLISHED, "x": "AAAA"}]}, f"The JWKS key {KID} is not a valid Ed25519 key."),
        (
            {"keys": [{**new_issuer_key(NOW).public_jwk, "kid": KID}]},
            f"The JWKS key {KID} does not have that thumbprint.",
        ),
    ],
)
def test_a_jwks_without_the_issuers_key_is_refused_with_what_it_lacks(keys: object, reason: str) -> None:
    assert _refusal(_approval_proof(), keys) == reason  # type: ignore[arg-type]


def test_a_jwks_with_other_entries_around_the_issuers_key_still_finds_it() -> None:
    keys = {"keys": ["junk", {"kid": "other"}, new_issuer_key(NOW).public_jwk, PUBLISHED]}
    assert verify(_approval_proof(), keys).sentence == SMS_SENTENCE


def test_a_jwks_key_with_a_private_half_is_read_for_its_public_half_only() -> None:
    keys = {"keys": [{**PUBLISHED, "d": "not a private key"}]}
    assert verify(_approval_proof(), keys).sentence == SMS_SENTENCE


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_set("_sd_alg", "sha-512"), "The proof's _sd_alg is not sha-256."),
        (_set("_sd_alg", None), "The proof's _sd_alg is not sha-256."),
        (_set("vct", "tapgate-other-v1"), "The proof's vct 'tapgate-other-v1' is not one tapgate issues."),
        (_set("vct", None), "The proof's vct None is not one tapgate issues."),
        (_set("action", ...), "The proof has no 'action' object."),
        (_set("action", ["tool"]), "The proof has no 'action' object."),
        (_set("approval", ...), "The proof has no 'approval' object."),
    ],
)
def test_a_proof_without_tapgates_claims_is_refused_naming_the_claim(
    change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    assert _refusal(_reissued(_approval_proof(), change)) == reason


def _digests(*disclosures: str) -> Callable[[dict[str, Any]], None]:
    return _set("action.arguments", {"_sd": [disclosure_digest(d) for d in disclosures]})


TO = disclosure("c2FsdA", "to", "+447700900123")
BODY = disclosure("c2FsdA", "body", "hi")
TO_AGAIN = disclosure("cGVwcGVy", "to", "+447700900999")


@pytest.mark.parametrize(
    ("change", "disclosures", "reason"),
    [
        (_set("action.arguments", ...), [TO], "The proof has disclosures but no arguments to disclose."),
        (_set("action.arguments", "x"), [], "The action's arguments are not a list of _sd digests."),
        (_set("action.arguments", {}), [], "The action's arguments are not a list of _sd digests."),
        (_set("action.arguments", {"_sd": "x"}), [], "The action's arguments are not a list of _sd digests."),
        (
            _set("action.arguments", {"_sd": [], "to": "+44"}),
            [],
            "The action's arguments are not a list of _sd digests.",
        ),
        (_digests(TO, TO), [TO], "The action's _sd lists a digest twice."),
        (_digests(TO), ["a+b"], "Disclosure 1 is not base64url."),
        (_digests(TO), [TO, _b64url(b'["salt", "to"')], "Disclosure 2 is not JSON: it may be cut short."),
        (_digests(TO), [_b64json(["salt", "to"])], "Disclosure 1 is not [salt, name, value]."),
        (_digests(TO), [_b64json(["salt", "to", "x", "y"])], "Disclosure 1 is not [salt, name, value]."),
        (_digests(TO), [_b64json([1, "to", "x"])], "Disclosure 1 is not [salt, name, value]."),
        (_digests(TO), [_b64json(["salt", 2, "x"])], "Disclosure 1 is not [salt, name, value]."),
        (_digests(TO), [_b64json({"salt": "to"})], "Disclosure 1 is not [salt, name, value]."),
        (_digests(TO), [TO_AGAIN], "Disclosure 1's digest is not in the action's _sd."),
        (_digests(TO, BODY), [TO, TO], "Disclosure 2 appears twice."),
        (_digests(TO, TO_AGAIN), [TO, TO_AGAIN], "Disclosure 2 names the argument 'to' again."),
    ],
)
def test_a_disclosure_that_does_not_fit_the_sd_digests_is_refused_naming_it(
    change: Callable[[dict[str, Any]], None], disclosures: list[str], reason: str
) -> None:
    assert _refusal(_reissued(_approval_proof(), change, disclosures)) == reason


@pytest.mark.parametrize("name", ["_sd", "..."])
def test_a_disclosure_may_not_name_an_argument_sd_jwt_reserves(name: str) -> None:
    reserved = disclosure("c2FsdA", name, "x")
    proof = _reissued(_approval_proof(), _digests(reserved), [reserved])
    assert _refusal(proof) == f"Disclosure 1 names the argument {name!r} again."


@pytest.mark.parametrize(
    ("cnf", "reason"),
    [
        (..., "The proof has no cnf.jwk: the device's key is missing."),
        ("jwk", "The proof has no cnf.jwk: the device's key is missing."),
        ({"key": {}}, "The proof has no cnf.jwk: the device's key is missing."),
        ({"jwk": "OKP"}, "The proof has no cnf.jwk: the device's key is missing."),
        ({"jwk": {"kty": "OKP", "crv": "Ed25519"}}, "cnf.jwk is not a valid device key."),
        (
            {"jwk": {"kty": "OKP", "crv": "Ed25519", "x": _b64url(bytes(31))}},
            "cnf.jwk is not a valid device key.",
        ),
        ({"jwk": {"kty": "OKP", "crv": "Ed25519", "x": "AA=="}}, "cnf.jwk.x is not base64url."),
        ({"jwk": {"kty": "EC", "crv": "P-256", "x": "AQ"}}, "cnf.jwk is not a valid device key."),
        ({"jwk": {"kty": "EC", "crv": "P-256", "x": "AQ", "y": "AQ"}}, "cnf.jwk is not a valid device key."),
        ({"jwk": {"kty": "EC", "crv": "P-256", "x": "A+", "y": "AQ"}}, "cnf.jwk.x is not base64url."),
        ({"jwk": {"kty": "EC", "crv": "P-256", "x": "AQ", "y": "A/"}}, "cnf.jwk.y is not base64url."),
        ({"jwk": {"kty": "RSA", "n": "AQ", "e": "AQ"}}, "cnf.jwk is neither an Ed25519 nor a P-256 key."),
        (
            {"jwk": {"kty": "OKP", "crv": "X25519", "x": "AQ"}},
            "cnf.jwk is neither an Ed25519 nor a P-256 key.",
        ),
        (
            {"jwk": {"kty": "EC", "crv": "P-384", "x": "AQ", "y": "AQ"}},
            "cnf.jwk is neither an Ed25519 nor a P-256 key.",
        ),
        (
            {"jwk": {"kty": "EC", "crv": "Ed25519", "x": "AQ"}},
            "cnf.jwk is neither an Ed25519 nor a P-256 key.",
        ),
        (
            {"jwk": {"kty": "OKP", "crv": "P-256", "x": "AQ", "y": "AQ"}},
            "cnf.jwk is neither an Ed25519 nor a P-256 key.",
        ),
    ],
)
def test_a_proof_without_a_usable_device_key_is_refused_naming_cnf(cnf: object, reason: str) -> None:
    assert _refusal(_reissued(_approval_proof(), _set("cnf", cnf))) == reason


@pytest.mark.parametrize(
    ("signature", "reason"),
    [
        (..., "The device's signature is not base64url."),
        (64, "The device's signature is not base64url."),
        ("A=", "The device's signature is not base64url."),
        (_b64url(bytes(63)), "The device's signature is not 64 bytes."),
        (_b64url(bytes(65)), "The device's signature is not 64 bytes."),
        (_b64url(bytes(62) + b"\x17"), "The device's signature is not 64 bytes."),  # its last letter is X
        (_b64url(bytes(64)), "The device's signature does not verify over the signed text with cnf.jwk."),
    ],
)
@pytest.mark.parametrize("private", [DEVICE, P256_DEVICE], ids=["ed25519", "p256"])
def test_a_device_signature_that_does_not_verify_is_refused(
    signature: object, reason: str, private: Device
) -> None:
    proof = _reissued(_approval_proof(private=private), _set("approval.signature", signature))
    assert _refusal(proof) == reason


@pytest.mark.parametrize(("private", "alg"), [(DEVICE, "p256"), (P256_DEVICE, "ed25519"), (DEVICE, None)])
def test_an_approval_whose_alg_is_not_its_keys_is_refused(private: Device, alg: str | None) -> None:
    proof = _reissued(_approval_proof(private=private), _set("approval.alg", alg))
    assert _refusal(proof) == "The approval's alg does not match the cnf key."


def test_a_device_signature_over_the_text_with_another_key_in_cnf_is_refused() -> None:
    other = device_jwk("ed25519", canonical_public_key(ed25519.Ed25519PrivateKey.generate().public_key()))
    proof = _reissued(_approval_proof(), _set("cnf", {"jwk": other}))
    assert _refusal(proof) == "The device's signature does not verify over the signed text with cnf.jwk."


TEXT = _text(_decided())


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (TEXT[:-1], "The signed text is missing or does not end in a line break."),
        (TEXT.replace("expires", "expires:\n"), "The signed text is not the eight lines a device signs."),
        (TEXT.replace("\nexpires: ", "-"), "The signed text is not the eight lines a device signs."),
        (TEXT.replace("kind: ", "kind "), "The signed text's line 'kind sms_send' is not 'name: value'."),
        (
            TEXT.replace("kind: sms_send", "kind: alarm_set"),
            "The signed text's kind line does not match the approval's kind.",
        ),
        (
            TEXT.replace("approval: apr-1", "approval: apr-2"),
            "The signed text's approval line does not match the approval's id.",
        ),
        (
            TEXT.replace("decision: approved", "decision: denied"),
            "The signed text's decision line does not match the approval's decision.",
        ),
        (
            TEXT.replace("subject: ana-phone", "subject: dad-phone"),
            "The signed text's subject line does not match the approval's subject.",
        ),
        (
            TEXT.replace(_decided().sign.action_sha256, "0" * 64),
            "The SHA-256 of the canonical action is not the signed text's action-sha256.",
        ),
        (
            TEXT.replace("action-sha256", "action-hash"),
            "The SHA-256 of the canonical action is not the signed text's action-sha256.",
        ),
    ],
)
@pytest.mark.parametrize("private", [DEVICE, P256_DEVICE], ids=["ed25519", "p256"])
def test_a_signed_text_that_is_not_the_approvals_is_refused_naming_the_line(
    text: str, reason: str, private: Device
) -> None:
    proof = _reissued(_approval_proof(private=private), _device_signs(text, private))
    assert _refusal(proof) == reason


def test_a_signed_text_with_a_blank_line_after_its_eight_is_refused() -> None:
    proof = _reissued(_approval_proof(), _device_signs(TEXT + "\n"))
    assert _refusal(proof) == "The signed text is not the eight lines a device signs."


def test_a_subject_holding_a_colon_and_a_space_is_read_whole() -> None:
    approval = _decided(subject="ana: phone")
    proof = approval_proof(_signer(), approval, _signed(approval), (41, "ab" * 32), True)
    assert verify(proof, KEYS).claims["approval"]["subject"] == "ana: phone"


def test_a_proof_without_a_signed_text_is_refused_even_with_a_signature_over_none() -> None:
    def change(claims: dict[str, Any]) -> None:
        _device_signs("None")(claims)
        del claims["approval"]["signed_text"]

    assert _refusal(_reissued(_approval_proof(), change)) == (
        "The signed text is missing or does not end in a line break."
    )


@pytest.mark.parametrize(
    ("claim", "value", "reason"),
    [
        ("id", "apr-2", "The signed text's approval line does not match the approval's id."),
        ("decision", "denied", "The signed text's decision line does not match the approval's decision."),
        ("kind", "alarm_set", "The signed text's kind line does not match the approval's kind."),
        ("subject", "dad-phone", "The signed text's subject line does not match the approval's subject."),
        ("subject", ..., "The signed text's subject line does not match the approval's subject."),
    ],
)
def test_an_approval_claim_that_is_not_what_the_device_signed_is_refused(
    claim: str, value: object, reason: str
) -> None:
    assert _refusal(_reissued(_approval_proof(), _set(f"approval.{claim}", value))) == reason


def test_a_decision_other_than_approved_or_denied_is_refused_even_when_signed() -> None:
    def change(claims: dict[str, Any]) -> None:
        _device_signs(TEXT.replace("decision: approved", "decision: maybe"))(claims)
        claims["approval"]["decision"] = "maybe"

    assert _refusal(_reissued(_approval_proof(), change)) == (
        "The signed text's decision line is neither approved nor denied."
    )


@pytest.mark.parametrize(
    "change",
    [
        _set("action.tool", "device__ana_phone__call"),
        _set("action.device", "dad-phone"),
        _set("action.capability", "call"),
        _set("action.preview_sha256", "00" * 32),
        _set("action.note", "added"),
    ],
)
def test_an_action_that_is_not_the_one_the_device_signed_fails_the_hash_check(
    change: Callable[[dict[str, Any]], None],
) -> None:
    assert _refusal(_reissued(_approval_proof(), change)) == (
        "The SHA-256 of the canonical action is not the signed text's action-sha256."
    )


def test_a_disclosed_value_of_another_type_fails_the_hash_check() -> None:
    proof = _approval_proof({"count": 1})
    jwt = proof.split("~")[0]
    changed = disclosure("c2FsdA", "count", "1")
    assert _refusal(_reissued(f"{jwt}~", _digests(changed), [changed])) == (
        "The SHA-256 of the canonical action is not the signed text's action-sha256."
    )


def test_a_disclosed_value_without_a_canonical_json_form_is_refused() -> None:
    nan = disclosure("c2FsdA", "count", float("nan"))
    assert _refusal(_reissued(_approval_proof(), _digests(nan), [nan])) == (
        "The action is not JSON that has a canonical form."
    )


@pytest.mark.parametrize("decided_at", ["2026-12-05 14:02:07", "yesterday", None])
def test_an_approval_whose_decision_time_is_not_a_utc_time_is_refused(decided_at: object) -> None:
    proof = _reissued(_approval_proof(), _set("approval.decided_at", decided_at))
    assert _refusal(proof) == "The proof's decided_at is not a UTC time."


# ---- mandates and calls ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "bounds"),
    [
        ("sms_send", BOUNDS),
        ("mandate", {**BOUNDS, "mandate_id": "mnd-2"}),
        ("mandate", {"tools": [LAMP_TOOL]}),
    ],
)
def test_a_mandate_proof_must_be_of_a_mandate_approval_about_that_mandate(
    kind: str, bounds: dict[str, Any]
) -> None:
    assert _refusal(_mandate_proof(bounds, kind=kind)) == (
        "A mandate's proof must be of a mandate approval about that mandate."
    )


def test_a_mandate_proof_with_a_bound_left_out_is_refused() -> None:
    proof = _mandate_proof()
    jwt, *disclosures = proof.split("~")[:-1]
    kept = [d for d in disclosures if json.loads(_unb64url(d))[1] != "purpose"]
    assert _refusal("~".join([jwt, *kept]) + "~") == "A mandate's proof must disclose every bound."


def test_a_mandate_whose_tools_are_not_a_list_is_malformed() -> None:
    assert _refusal(_mandate_proof({**BOUNDS, "tools": 5})) == (
        "The proof is malformed: a claim has the wrong shape (TypeError)."
    )


@pytest.mark.parametrize(
    ("mandate", "reason"),
    [
        (..., "The proof has no 'mandate' object."),
        ("proof", "The proof has no 'mandate' object."),
        ({}, "A call's proof must carry its mandate's proof."),
        ({"proof": None}, "A call's proof must carry its mandate's proof."),
        ({"proof": ["x"]}, "A call's proof must carry its mandate's proof."),
    ],
)
def test_a_call_without_its_mandates_proof_is_refused(mandate: object, reason: str) -> None:
    assert _refusal(_reissued(_call_proof(), _set("mandate", mandate))) == reason


def test_a_call_without_its_call_claims_is_refused() -> None:
    assert _refusal(_reissued(_call_proof(), _set("call", ...))) == "The proof has no 'call' object."


def test_a_call_whose_mandate_proof_was_changed_is_refused_naming_the_mandates_check() -> None:
    inner = _mandate_proof()
    jwt, rest = inner.split("~", 1)
    head64, body64, sig64 = jwt.split(".")
    changed = f"{head64}.{body64}.{sig64[:10]}{'A' if sig64[10] != 'A' else 'B'}{sig64[11:]}~{rest}"
    assert _refusal(_call_proof(changed)) == (
        f"The mandate's proof: The issuer's signature does not verify with key {KID}."
    )


def test_a_call_carrying_a_call_proof_is_refused() -> None:
    assert _refusal(_call_proof(_call_proof())) == (
        "The mandate's proof: The proof's vct 'tapgate-call-v1' is not one tapgate issues."
    )


def test_a_call_carrying_an_approval_proof_instead_of_a_mandates_is_refused() -> None:
    assert _refusal(_call_proof(_approval_proof())) == "The proof a call carries is not a mandate's."


@pytest.mark.parametrize(
    ("mandate", "call", "reason"),
    [
        (
            {"status": ApprovalStatus.DENIED},
            {},
            "The call's mandate was not approved.",
        ),
        ({}, {"mandate_id": "mnd-2"}, "The call names another mandate than the proof it carries."),
        ({"user": "bob"}, {}, "The call and its mandate are not the same person's."),
        ({}, {"tool": SMS_TOOL}, "The call's tool is not one its mandate lists."),
        ({}, {"agent_id": "night-bot"}, "The call's agent is not the one its mandate is for."),
    ],
)
def test_a_call_outside_its_mandate_is_refused_naming_the_bound(
    mandate: dict[str, Any], call: dict[str, Any], reason: str
) -> None:
    assert _refusal(_call_proof(_mandate_proof(**mandate), **call)) == reason


def test_a_call_under_a_mandate_without_tools_is_refused() -> None:
    bounds = {k: v for k, v in BOUNDS.items() if k != "tools"}
    assert _refusal(_call_proof(_mandate_proof(bounds))) == "The call's tool is not one its mandate lists."


def test_a_call_whose_time_is_not_a_utc_time_is_refused() -> None:
    proof = _reissued(_call_proof(), _set("call.created_at", "soon"))
    assert _refusal(proof) == "The proof's call.created_at is not a UTC time."
