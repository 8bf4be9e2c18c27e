"""Proofs in the domain: the RFC examples for thumbprints, Ed25519 JWS and disclosure digests, a proof
built and checked by tapgate and by a verifier that imports nothing of tapgate, hidden arguments, and
that any changed byte of a proof fails both."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapgate.domain.approvals import action_sha256, new_sign_block, sign_decision, signed_text
from tapgate.domain.errors import ProofRefused
from tapgate.domain.inbox import Approval, ApprovalStatus
from tapgate.domain.keys import KeyAlgorithm, canonical_public_key
from tapgate.domain.proofs import (
    Issued,
    IssuerKey,
    SignedDecision,
    Signer,
    approval_proof,
    disclosure,
    disclosure_digest,
    jwks,
    new_issuer_key,
    thumbprint,
    verify,
)
from tests import independent_verifier

NOW = datetime(2026, 12, 5, 14, 2, 7, tzinfo=UTC)
# RFC 8037 appendix A.1: an Ed25519 key; A.3 its RFC 7638 thumbprint; A.4 a JWS it signs.
RFC8037_KEY: dict[str, str | list[str]] = {
    "kty": "OKP",
    "crv": "Ed25519",
    "d": "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A",
    "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
}
RFC8037_THUMBPRINT = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
# RFC 9901: disclosures of an object property (sections 4.2.1 and 5.1) and of an array element (4.2.2).
RFC9901_DISCLOSURES = [
    (
        "WyJfMjZiYzRMVC1hYzZxMktJNmNCVzVlcyIsICJmYW1pbHlfbmFtZSIsICJNw7ZiaXVzIl0",
        "X9yH0Ajrdm1Oij4tWso9UzzKJvPoDxwmuEcO3XAdRC0",
    ),
    (
        "WyIyR0xDNDJzS1F2ZUNmR2ZyeU5STjl3IiwgImdpdmVuX25hbWUiLCAiSm9obiJd",
        "jsu9yVulwQQlhFlM_3JlzMaSFzglhQG0DpfayQwLUK4",
    ),
    ("WyJsa2x4RjVqTVlsR1RQVW92TU5JdkNBIiwgIkZSIl0", "w0I8EKcdCtUPkGCNUrfwVp2xEgNjtoIDlOxc9-PlOhs"),
]
SENTENCE = (
    "ana's device ana-phone approved sms_send to +44…, 14:02 UTC on 5 Dec 2026, all 2 arguments disclosed"
)
ARGUMENTS = {"to": "+447700900123", "body": "Running late, back at 7"}
TOOL = "device__ana_phone__sms_send"
PREVIEW = {"kind": "sms_send", "fields": [{"label": "To", "value": "+447700900123"}]}


def _rfc8037_issuer() -> IssuerKey:
    return IssuerKey(RFC8037_THUMBPRINT, json.dumps(RFC8037_KEY), NOW)


def _decided(
    private: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey, raw: bool = False
) -> tuple[Approval, SignedDecision]:
    alg = KeyAlgorithm.ED25519 if isinstance(private, ed25519.Ed25519PrivateKey) else KeyAlgorithm.P256
    sign = new_sign_block(action_sha256(TOOL, "ana-phone", "sms_send", ARGUMENTS, PREVIEW), NOW, 3600)
    approval = Approval(
        tenant_id="t1",
        approval_id="apr-1",
        user_id="ana",
        agent_id="assistant",
        invocation_id="call-1",
        kind="sms_send",
        subject="ana-phone",
        prompt="assistant asks to send a text",
        preview=PREVIEW,
        sign=sign,
        binding_code="ACDE",
        status=ApprovalStatus.APPROVED,
        created_at=NOW,
        expires_at=NOW,
        decided_at=NOW,
        decided_by="device:ana-phone",
        tool=TOOL,
        arguments=ARGUMENTS,
    )
    text = signed_text(
        sign.format,
        "apr-1",
        "approved",
        "sms_send",
        "ana-phone",
        sign.action_sha256,
        sign.challenge,
        sign.expires_at,
    )
    public = canonical_public_key(private.public_key())
    return approval, SignedDecision(
        "apr-1", "ana-phone", alg.value, public, sign_decision(private, text, raw)
    )


def _proof(
    disclose: bool = True, issuer: IssuerKey | None = None, **device: Any
) -> tuple[str, dict[str, Any]]:
    key = issuer or new_issuer_key(NOW)
    approval, signed = _decided(
        device.get("private") or ed25519.Ed25519PrivateKey.generate(), device.get("raw", False)
    )
    proof = approval_proof(
        Signer(Issued("https://gw.test", key, NOW)), approval, signed, (41, "ab" * 32), disclose
    )
    return proof, jwks([key])


def test_a_thumbprint_is_rfc_7638s_and_rfc_8037s_example_value() -> None:
    assert thumbprint(RFC8037_KEY) == RFC8037_THUMBPRINT
    assert independent_verifier.thumbprint(RFC8037_KEY) == RFC8037_THUMBPRINT
    assert jwks([_rfc8037_issuer()])["keys"][0]["kid"] == RFC8037_THUMBPRINT


def test_the_published_issuer_key_holds_nothing_private() -> None:
    published = jwks([_rfc8037_issuer()])["keys"][0]
    assert "d" not in published
    assert published == {
        **{k: RFC8037_KEY[k] for k in ("kty", "crv", "x")},
        "kid": RFC8037_THUMBPRINT,
        "alg": "EdDSA",
        "use": "sig",
    }
    assert "nWGxne" not in repr(_rfc8037_issuer())


def test_a_proof_is_signed_as_rfc_8037s_example_signs() -> None:
    import warnings

    from joserfc import jws
    from joserfc.jwk import OKPKey

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        token = jws.serialize_compact(
            {"alg": "EdDSA"},
            b"Example of Ed25519 signing",
            OKPKey.import_key(RFC8037_KEY),
            algorithms=["EdDSA"],
        )
    assert token == (
        "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4"
        "ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
    )


@pytest.mark.parametrize(("encoded", "digest"), RFC9901_DISCLOSURES)
def test_a_disclosure_digest_is_rfc_9901s_example_value(encoded: str, digest: str) -> None:
    assert disclosure_digest(encoded) == digest


def test_a_disclosure_is_the_base64url_of_salt_name_and_value() -> None:
    made = disclosure("2GLC42sKQveCfGfryNRN9w", "given_name", "John")
    assert json.loads(__import__("base64").urlsafe_b64decode(made + "==")) == [
        "2GLC42sKQveCfGfryNRN9w",
        "given_name",
        "John",
    ]


@pytest.mark.parametrize("alg", ["ed25519", "p256-der", "p256-raw"])
def test_a_proof_verifies_with_tapgate_and_with_a_verifier_that_imports_nothing_of_it(alg: str) -> None:
    private = (
        ed25519.Ed25519PrivateKey.generate() if alg == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    )
    proof, keys = _proof(private=private, raw=alg == "p256-raw")
    proven = verify(proof, keys)
    assert proven.sentence == SENTENCE
    assert proven.arguments == ARGUMENTS
    checked = independent_verifier.check(proof, keys)
    assert checked["arguments"] == ARGUMENTS and checked["hidden"] == 0
    assert checked["journal"] == {"seq": 41, "hash": "ab" * 32}


def test_a_proof_without_disclosures_shows_no_argument_value_and_still_verifies() -> None:
    proof, keys = _proof(disclose=False)
    assert "Running late" not in proof and "+447700900123" not in proof
    assert "Running late" not in json.dumps(verify(proof, keys).claims)
    assert verify(proof, keys).sentence.endswith(
        "0 of 2 arguments disclosed (the action's hash is checked only with all)"
    )
    assert independent_verifier.check(proof, keys)["hidden"] == 2


def test_a_proof_fails_against_a_jwks_without_its_key() -> None:
    proof, _ = _proof()
    with pytest.raises(ProofRefused, match="has no key"):
        verify(proof, jwks([new_issuer_key(NOW)]))


def test_a_cut_short_disclosure_fails_with_a_reason() -> None:
    proof, keys = _proof()
    jwt, first, *rest = proof.split("~")
    with pytest.raises(ProofRefused, match="Disclosure 1"):
        verify("~".join([jwt, first[:-5], *rest]), keys)


def test_a_disclosure_of_another_value_fails() -> None:
    proof, keys = _proof()
    jwt, *_ = proof.split("~")
    forged = disclosure("c2FsdA", "to", "+447700900999")
    with pytest.raises(ProofRefused, match="not in the action's _sd"):
        verify(f"{jwt}~{forged}~", keys)
    with pytest.raises(independent_verifier.Refused):
        independent_verifier.check(f"{jwt}~{forged}~", keys)


def test_a_proof_whose_signed_text_names_another_action_fails_the_hash_check() -> None:
    key = new_issuer_key(NOW)
    approval, signed = _decided(ed25519.Ed25519PrivateKey.generate())
    changed = replace(approval, arguments={**ARGUMENTS, "body": "Send money"})
    proof = approval_proof(Signer(Issued("https://gw.test", key, NOW)), changed, signed, (1, "00" * 32), True)
    with pytest.raises(ProofRefused, match="action-sha256"):
        verify(proof, jwks([key]))
    with pytest.raises(independent_verifier.Refused, match="action-sha256"):
        independent_verifier.check(proof, jwks([key]))


@pytest.mark.parametrize("bad", ["", "not a proof", "a.b.c", "a.b.c~", "~~~", "\x00~"])
def test_input_that_is_not_a_proof_is_refused_with_a_reason(bad: str) -> None:
    with pytest.raises(ProofRefused):
        verify(bad, jwks([new_issuer_key(NOW)]))


_ONE_PROOF = _proof()


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.data())
def test_any_changed_byte_of_a_proof_fails_both_verifiers(data: st.DataObject) -> None:
    proof, keys = _ONE_PROOF
    at = data.draw(st.integers(0, len(proof) - 1))
    byte = data.draw(
        st.sampled_from(sorted(set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~=")))
    )
    changed = proof[:at] + byte + proof[at + 1 :]
    if changed == proof:
        return
    with pytest.raises(ProofRefused):
        verify(changed, keys)
    with pytest.raises((independent_verifier.Refused, ValueError, KeyError, TypeError, AttributeError)):
        independent_verifier.check(changed, keys)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
CLAIMS = st.fixed_dictionaries(
    {"_sd_alg": st.just("sha-256"), "vct": st.sampled_from(["tapgate-approval-v1", "tapgate-call-v1", "x"])},
    optional={"action": JSON, "approval": JSON, "cnf": JSON, "call": JSON, "mandate": JSON, "sub": JSON},
)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_refused_with_a_reason_never_a_crash(text: str) -> None:
    with pytest.raises(ProofRefused):
        verify(text, jwks([_rfc8037_issuer()]))


@settings(max_examples=200, deadline=None)
@given(CLAIMS, st.lists(st.text(max_size=20), max_size=3))
def test_claims_of_any_shape_under_a_valid_issuer_signature_are_refused_with_a_reason(
    claims: dict[str, Any], disclosures: list[str]
) -> None:
    key = _rfc8037_issuer()
    signed = Signer(Issued("https://gw.test", key, NOW)).sign(str(claims["vct"]), "ana", claims, None, True)
    jwt = signed.split("~")[0]
    with pytest.raises(ProofRefused):
        verify("~".join([jwt, *disclosures]) + "~", jwks([key]))
