"""Proofs: a decided approval, a mandate, or a call made under one, as an SD-JWT (RFC 9901) anyone can
check offline with the tenant's published issuer keys.

A proof is ``<issuer-signed JWT>~<disclosure>~…~``: the JWT (header ``typ: dc+sd-jwt``, ``alg: EdDSA``,
``kid``: the issuer key's RFC 7638 thumbprint) carries what the person's device signed, the device's key
(``cnf.jwk``) and signature, the planned action with each argument value replaced by the digest of a
disclosure (``action.arguments._sd``), and the journal entry that recorded the decision. Leaving a
disclosure out hides that argument's value (an SMS body) and keeps everything else checkable.

The checks, in order (``verify``): the JWS against the key its ``kid`` names; every disclosure's digest in
``_sd``; the device's signature over the signed text with ``cnf.jwk``; the signed text's lines against the
claims (approval id, decision, kind, subject); with every argument disclosed, the SHA-256 of the planned
action's canonical JSON against the text's ``action-sha256``. A call under a mandate carries the mandate's
own proof, which is checked the same way, and the call's tool must be one the mandate lists.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey

from tapgate.domain.approvals import Decision, canonical_json, preview_sha256, signed_text, verify_decision
from tapgate.domain.errors import InvalidInput, ProofRefused
from tapgate.domain.inbox import Approval
from tapgate.domain.invocations import Invocation
from tapgate.domain.keys import KeyAlgorithm, load_public_key

__all__ = [
    "ALG",
    "TYP",
    "VCT_APPROVAL",
    "VCT_CALL",
    "VCT_MANDATE",
    "Issued",
    "IssuerKey",
    "Proven",
    "SignedDecision",
    "Signer",
    "approval_proof",
    "call_proof",
    "device_jwk",
    "disclosure",
    "disclosure_digest",
    "jwks",
    "new_issuer_key",
    "thumbprint",
    "verify",
]

TYP = "dc+sd-jwt"
ALG = "EdDSA"
SD_ALG = "sha-256"
VCT_APPROVAL = "tapgate-approval-v1"
VCT_MANDATE = "tapgate-mandate-v1"
VCT_CALL = "tapgate-call-v1"
_MAX_PROOF_CHARS = 1_000_000
_P256_HALF = 32  # bytes of r, s, x or y, big-endian: int.to_bytes/from_bytes default, as JOSE wants


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: object, what: str) -> bytes:
    # Padding, '+' and '/' never survive the round trip below: one check refuses every other spelling.
    if not isinstance(text, str) or not text:
        raise ProofRefused(f"{what} is not base64url.")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ProofRefused(f"{what} is not base64url.") from None
    if _b64url(data) != text:
        raise ProofRefused(f"{what} is not base64url.")
    return data


# ---- the issuer key ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IssuerKey:
    """One of a tenant's Ed25519 issuer keys. ``private_jwk`` is a secret: it never leaves the store, the
    proof builder and this object (its repr hides it)."""

    kid: str
    private_jwk: str
    created_at: datetime

    def __repr__(self) -> str:
        return f"IssuerKey(kid={self.kid!r}, created_at={self.created_at.isoformat()!r})"

    @property
    def public_jwk(self) -> dict[str, Any]:
        key = OKPKey.import_key(json.loads(self.private_jwk))
        return {**key.as_dict(private=False), "kid": self.kid, "alg": ALG, "use": "sig"}

    def signing_key(self) -> OKPKey:
        """The private key, for the proof builder only."""
        return OKPKey.import_key(json.loads(self.private_jwk))


def thumbprint(jwk: Mapping[str, Any]) -> str:
    """The RFC 7638 SHA-256 thumbprint of a public JWK (OKP or EC), base64url."""
    if jwk.get("kty") == "OKP":
        return OKPKey.import_key(dict(jwk)).thumbprint()
    if jwk.get("kty") == "EC":
        return ECKey.import_key(dict(jwk)).thumbprint()
    raise ProofRefused("A key in the JWKS is neither OKP nor EC.")


def new_issuer_key(now: datetime) -> IssuerKey:
    key = OKPKey.generate_key("Ed25519")
    return IssuerKey(key.thumbprint(), json.dumps(key.as_dict(private=True)), now)


def jwks(keys: Sequence[IssuerKey]) -> dict[str, list[dict[str, Any]]]:
    """The public half of ``keys`` as a JWK Set, each with its thumbprint as ``kid``."""
    return {"keys": [k.public_jwk for k in keys]}


def device_jwk(alg: KeyAlgorithm | str, public_key: str) -> dict[str, str]:
    """A device's enrolled key (base64, as stored) as a public JWK: OKP Ed25519 or EC P-256."""
    key = load_public_key(alg, public_key)
    if isinstance(key, ed25519.Ed25519PublicKey):
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw)}
    numbers = key.public_numbers()
    return {
        "kty": "EC",
        "crv": "P-256",
        "x": _b64url(numbers.x.to_bytes(_P256_HALF)),
        "y": _b64url(numbers.y.to_bytes(_P256_HALF)),
    }


# ---- disclosures -------------------------------------------------------------------------------------


def disclosure(salt: str, name: str, value: object) -> str:
    """An object property's disclosure: base64url of the JSON array ``[salt, name, value]``."""
    return _b64url(json.dumps([salt, name, value], ensure_ascii=False).encode())


def disclosure_digest(encoded: str) -> str:
    """base64url of the SHA-256 of the disclosure's ASCII text, as ``_sd`` lists it."""
    return _b64url(hashlib.sha256(encoded.encode("ascii")).digest())


def new_salt() -> str:
    return secrets.token_urlsafe(16)


# ---- building ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SignedDecision:
    """What a device signed to decide an approval: kept with the approval so a proof can carry it."""

    approval_id: str
    device_id: str
    alg: str
    public_key: str  # base64 SubjectPublicKeyInfo, as the device was enrolled
    signature: str  # as the device sent it

    def raw_signature(self, payload: str) -> bytes:
        """The signature as 64 bytes (Ed25519, or P-256 r‖s) whichever encoding the device sent; raises
        SignatureRefused if it does not verify over ``payload``."""
        verify_decision(self.alg, self.public_key, payload, self.signature)
        blob = _any_b64(self.signature)
        if KeyAlgorithm(self.alg) is KeyAlgorithm.ED25519:
            return blob
        if len(blob) == 2 * _P256_HALF and _p256_ok(self.public_key, payload, blob):
            return blob
        r, s = decode_dss_signature(blob)
        return r.to_bytes(_P256_HALF) + s.to_bytes(_P256_HALF)


def _any_b64(text: str) -> bytes:
    t = text.replace("-", "+").replace("_", "/")
    return base64.b64decode(t + "=" * (-len(t) % 4))


def _p256_ok(public_key: str, payload: str, raw: bytes) -> bool:
    key = load_public_key(KeyAlgorithm.P256, public_key)
    assert isinstance(key, ec.EllipticCurvePublicKey)
    der = encode_dss_signature(int.from_bytes(raw[:_P256_HALF]), int.from_bytes(raw[_P256_HALF:]))
    try:
        key.verify(der, payload.encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Issued:
    """Who signs a proof and when: the gateway's public URL, the tenant's current key, the time."""

    issuer: str
    key: IssuerKey
    at: datetime


class Signer:
    """Builds proofs: claims, disclosures, and the issuer's signature."""

    def __init__(self, issued: Issued, salt: Callable[[], str] = new_salt) -> None:
        self.issued = issued
        self._salt = salt

    def sign(
        self,
        vct: str,
        sub: str,
        claims: Mapping[str, Any],
        arguments: Mapping[str, Any] | None,
        disclose: bool,
    ) -> str:
        """The SD-JWT of ``claims``; when ``arguments`` is given, ``claims["action"]["arguments"]`` is
        replaced by one ``_sd`` digest per argument, disclosed unless ``disclose`` is False."""
        payload: dict[str, Any] = {
            "iss": self.issued.issuer,
            "iat": int(self.issued.at.timestamp()),
            "vct": vct,
            "sub": sub,
            "_sd_alg": SD_ALG,
            **claims,
        }
        disclosures: list[str] = []
        if arguments is not None:
            for name in sorted(arguments):
                disclosures.append(disclosure(self._salt(), name, arguments[name]))
            action = dict(payload["action"])
            action["arguments"] = {"_sd": sorted(disclosure_digest(d) for d in disclosures)}
            payload["action"] = action
        header = {"alg": ALG, "typ": TYP, "kid": self.issued.key.kid}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jwt = jws.serialize_compact(
                header, canonical_json(payload), self.issued.key.signing_key(), algorithms=[ALG]
            )
        shown = disclosures if disclose else []
        return "~".join([jwt, *shown]) + "~"


def when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- verifying ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Proven:
    """What a proof that verified shows: its claims with the disclosed arguments put back, and one
    sentence a person reads."""

    vct: str
    claims: Mapping[str, Any]
    arguments: Mapping[str, Any]
    hidden: int
    sentence: str


def verify(proof: str, keys: Mapping[str, Any]) -> Proven:
    """Check ``proof`` against the JWK Set ``keys``; raises ProofRefused naming the first check that
    failed."""
    if not isinstance(proof, str) or not proof.strip():
        raise ProofRefused("The file is empty: there is no proof in it.")
    proof = proof.strip()
    if len(proof) > _MAX_PROOF_CHARS:
        raise ProofRefused("The proof is too long to be one of tapgate's.")
    try:
        return _verify(proof, keys)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as e:
        # A claim of the wrong JSON type deep inside: the proof is not one tapgate issues.
        raise ProofRefused(
            f"The proof is malformed: a claim has the wrong shape ({type(e).__name__})."
        ) from None


def _verify(proof: str, keys: Mapping[str, Any], nested: bool = False) -> Proven:
    parts = proof.split("~")
    if len(parts) < 2 or parts[-1] != "":
        raise ProofRefused(
            "Not an SD-JWT: it must be the issuer-signed JWT and its disclosures, each followed by '~'."
        )
    jwt, disclosures = parts[0], parts[1:-1]
    payload = _checked_jws(jwt, keys)
    if payload.get("_sd_alg") != SD_ALG:
        raise ProofRefused("The proof's _sd_alg is not sha-256.")
    vct = payload.get("vct")
    action = _object(payload, "action")
    arguments, hidden = _disclosed(action, disclosures)
    if vct in (VCT_APPROVAL, VCT_MANDATE):
        sentence = _check_approval(payload, action, arguments, hidden, vct)
    elif vct == VCT_CALL and not nested:
        sentence = _check_call(payload, action, arguments, hidden, keys)
    else:
        raise ProofRefused(f"The proof's vct {vct!r} is not one tapgate issues.")
    return Proven(str(vct), payload, arguments, hidden, sentence)


def _checked_jws(jwt: str, keys: Mapping[str, Any]) -> dict[str, Any]:
    pieces = jwt.split(".")
    if len(pieces) != 3:
        raise ProofRefused("Not an SD-JWT: the part before the first '~' is not a compact JWS.")
    _unb64url(pieces[2], "The issuer's signature")  # only one spelling of the bytes is accepted
    _unb64url(pieces[1], "The JWT's payload")
    try:
        header = json.loads(_unb64url(pieces[0], "The JWS header"))
    except (ValueError, UnicodeDecodeError):
        raise ProofRefused("The JWS header is not JSON.") from None
    if not isinstance(header, dict):
        raise ProofRefused("The JWS header is not a JSON object.")
    if header.get("alg") != ALG:
        raise ProofRefused(f"The JWS alg is {header.get('alg')!r}, not EdDSA.")
    if header.get("typ") != TYP:
        raise ProofRefused(f"The JWS typ is {header.get('typ')!r}, not dc+sd-jwt.")
    kid = header.get("kid")
    key = _key_for(kid, keys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            found = jws.deserialize_compact(jwt, key, algorithms=[ALG])
        except (JoseError, ValueError):
            raise ProofRefused(f"The issuer's signature does not verify with key {kid}.") from None
    try:
        payload = json.loads(found.payload)
    except (ValueError, UnicodeDecodeError):
        raise ProofRefused("The JWT's payload is not JSON.") from None
    if not isinstance(payload, dict):
        raise ProofRefused("The JWT's payload is not a JSON object.")
    return payload


def _key_for(kid: object, keys: Mapping[str, Any]) -> OKPKey:
    listed = keys.get("keys") if isinstance(keys, Mapping) else None
    if not isinstance(listed, list):
        raise ProofRefused("The JWKS is not a JWK Set: it has no 'keys' list.")
    for jwk in listed:
        if isinstance(jwk, dict) and jwk.get("kid") == kid:
            if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
                raise ProofRefused(f"The JWKS key {kid} is not an Ed25519 key.")
            try:
                key = OKPKey.import_key({k: jwk[k] for k in ("kty", "crv", "x")})
            except (JoseError, ValueError, KeyError):
                raise ProofRefused(f"The JWKS key {kid} is not a valid Ed25519 key.") from None
            if key.thumbprint() != kid:
                raise ProofRefused(f"The JWKS key {kid} does not have that thumbprint.")
            return key
    raise ProofRefused(f"The JWKS has no key {kid!r}: it was not signed by these issuer keys.")


def _object(claims: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = claims.get(name)
    if not isinstance(value, dict):
        raise ProofRefused(f"The proof has no {name!r} object.")
    return value


def _disclosed(action: Mapping[str, Any], disclosures: Sequence[str]) -> tuple[dict[str, Any], int]:
    """The arguments the disclosures reveal, and how many stay hidden."""
    holder = action.get("arguments")
    if holder is None:
        if disclosures:
            raise ProofRefused("The proof has disclosures but no arguments to disclose.")
        return {}, 0
    if not isinstance(holder, dict) or set(holder) != {"_sd"} or not isinstance(holder["_sd"], list):
        raise ProofRefused("The action's arguments are not a list of _sd digests.")
    digests = holder["_sd"]
    if len(set(digests)) != len(digests):
        raise ProofRefused("The action's _sd lists a digest twice.")
    found: dict[str, Any] = {}
    seen: set[str] = set()
    for n, encoded in enumerate(disclosures, 1):
        try:
            decoded = json.loads(_unb64url(encoded, f"Disclosure {n}"))
        except (ValueError, UnicodeDecodeError):
            raise ProofRefused(f"Disclosure {n} is not JSON: it may be cut short.") from None
        if not (
            isinstance(decoded, list) and len(decoded) == 3 and all(isinstance(x, str) for x in decoded[:2])
        ):
            raise ProofRefused(f"Disclosure {n} is not [salt, name, value].")
        digest = disclosure_digest(encoded)
        if digest not in digests:
            raise ProofRefused(f"Disclosure {n}'s digest is not in the action's _sd.")
        if digest in seen:
            raise ProofRefused(f"Disclosure {n} appears twice.")
        seen.add(digest)
        name = decoded[1]
        if name in found or name in ("_sd", "..."):
            raise ProofRefused(f"Disclosure {n} names the argument {name!r} again.")
        found[name] = decoded[2]
    return found, len(digests) - len(found)


def _signed_lines(text: object) -> dict[str, str]:
    if not isinstance(text, str) or not text.endswith("\n"):
        raise ProofRefused("The signed text is missing or does not end in a line break.")
    lines = text[:-1].split("\n")
    if len(lines) != 8:
        raise ProofRefused("The signed text is not the eight lines a device signs.")
    fields: dict[str, str] = {}
    for line in lines[1:]:  # the first names the format, and any name is read alike (approvals.py)
        name, sep, value = line.partition(": ")
        if not sep:
            raise ProofRefused(f"The signed text's line {line!r} is not 'name: value'.")
        fields[name] = value
    return fields


def _device_key(claims: Mapping[str, Any]) -> ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey:
    cnf = claims.get("cnf")
    jwk = cnf.get("jwk") if isinstance(cnf, dict) else None
    if not isinstance(jwk, dict):
        raise ProofRefused("The proof has no cnf.jwk: the device's key is missing.")
    try:
        if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519":
            return ed25519.Ed25519PublicKey.from_public_bytes(_unb64url(jwk["x"], "cnf.jwk.x"))
        if jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
            x = int.from_bytes(_unb64url(jwk["x"], "cnf.jwk.x"))
            y = int.from_bytes(_unb64url(jwk["y"], "cnf.jwk.y"))
            return ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    except (KeyError, ValueError):
        raise ProofRefused("cnf.jwk is not a valid device key.") from None
    raise ProofRefused("cnf.jwk is neither an Ed25519 nor a P-256 key.")


def _check_device_signature(claims: Mapping[str, Any], approval: Mapping[str, Any]) -> None:
    key = _device_key(claims)
    text = approval.get("signed_text")
    signature = _unb64url(approval.get("signature"), "The device's signature")
    if len(signature) != 2 * _P256_HALF:
        raise ProofRefused("The device's signature is not 64 bytes.")
    data = str(text).encode()
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            if approval.get("alg") != KeyAlgorithm.ED25519.value:
                raise ProofRefused("The approval's alg does not match the cnf key.")
            key.verify(signature, data)
        else:
            if approval.get("alg") != KeyAlgorithm.P256.value:
                raise ProofRefused("The approval's alg does not match the cnf key.")
            r, s = (
                int.from_bytes(signature[:_P256_HALF]),
                int.from_bytes(signature[_P256_HALF:]),
            )
            key.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ProofRefused(
            "The device's signature does not verify over the signed text with cnf.jwk."
        ) from None


def _check_approval(
    payload: Mapping[str, Any], action: Mapping[str, Any], arguments: Mapping[str, Any], hidden: int, vct: str
) -> str:
    approval = _object(payload, "approval")
    _check_device_signature(payload, approval)
    lines = _signed_lines(approval.get("signed_text"))
    for field, claim in (
        ("approval", "id"),
        ("decision", "decision"),
        ("kind", "kind"),
        ("subject", "subject"),
    ):
        if lines.get(field) != approval.get(claim):
            raise ProofRefused(f"The signed text's {field} line does not match the approval's {claim}.")
    if lines["decision"] not in (Decision.APPROVED.value, Decision.DENIED.value):
        raise ProofRefused("The signed text's decision line is neither approved nor denied.")
    if vct == VCT_MANDATE:
        if approval.get("kind") != "mandate" or arguments.get("mandate_id") != approval.get("subject"):
            raise ProofRefused("A mandate's proof must be of a mandate approval about that mandate.")
        if hidden:
            raise ProofRefused("A mandate's proof must disclose every bound.")
    if hidden == 0:
        planned = {**action, "arguments": dict(arguments)} if "arguments" in action else dict(action)
        try:
            digest = hashlib.sha256(canonical_json(planned)).hexdigest()
        except InvalidInput:
            raise ProofRefused("The action is not JSON that has a canonical form.") from None
        if digest != lines.get("action-sha256"):
            raise ProofRefused("The SHA-256 of the canonical action is not the signed text's action-sha256.")
    return _approval_sentence(payload, approval, arguments, hidden, vct)


def _time(text: object, name: str) -> str:
    try:
        at = datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise ProofRefused(f"The proof's {name} is not a UTC time.") from None
    return f"{at:%H:%M} UTC on {at.day} {at:%b %Y}"


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 3 else text[:3] + "…"


def _disclosed_words(arguments: Mapping[str, Any], hidden: int) -> str:
    total = len(arguments) + hidden
    if total == 0:
        return "no arguments"
    plural = "argument" if total == 1 else "arguments"
    if hidden == 0:
        return f"all {total} {plural} disclosed"
    return f"{len(arguments)} of {total} {plural} disclosed (the action's hash is checked only with all)"


def _who(payload: Mapping[str, Any], approval: Mapping[str, Any]) -> str:
    return f"{payload.get('sub')}'s device {approval.get('device_id')} {approval.get('decision')}"


def _approval_sentence(
    payload: Mapping[str, Any],
    approval: Mapping[str, Any],
    arguments: Mapping[str, Any],
    hidden: int,
    vct: str,
) -> str:
    who = _who(payload, approval)
    at = _time(approval.get("decided_at"), "decided_at")
    if vct == VCT_MANDATE:
        tools = ", ".join(str(t) for t in arguments.get("tools", []))
        bounds = f"for {tools} (at most {arguments.get('max_calls')} calls)"
        return f"{who} mandate {approval.get('subject')} {bounds}, {at}"
    to = f" to {_shown(arguments['to'])}" if "to" in arguments else ""
    return f"{who} {approval.get('kind')}{to}, {at}, {_disclosed_words(arguments, hidden)}"


def _check_call(
    payload: Mapping[str, Any],
    action: Mapping[str, Any],
    arguments: Mapping[str, Any],
    hidden: int,
    keys: Mapping[str, Any],
) -> str:
    call = _object(payload, "call")
    mandate = _object(payload, "mandate")
    inner = mandate.get("proof")
    if not isinstance(inner, str):
        raise ProofRefused("A call's proof must carry its mandate's proof.")
    try:
        proven = _verify(inner, keys, nested=True)
    except ProofRefused as e:
        raise ProofRefused(f"The mandate's proof: {e.message}") from None
    if proven.vct != VCT_MANDATE:
        raise ProofRefused("The proof a call carries is not a mandate's.")
    signed = proven.claims["approval"]
    bounds = proven.arguments
    if signed.get("decision") != Decision.APPROVED.value:
        raise ProofRefused("The call's mandate was not approved.")
    if bounds.get("mandate_id") != call.get("mandate_id"):
        raise ProofRefused("The call names another mandate than the proof it carries.")
    if proven.claims.get("sub") != payload.get("sub"):
        raise ProofRefused("The call and its mandate are not the same person's.")
    if action.get("tool") not in bounds.get("tools", []):
        raise ProofRefused("The call's tool is not one its mandate lists.")
    agent = bounds.get("agent_id")
    if agent is not None and agent != call.get("agent_id"):
        raise ProofRefused("The call's agent is not the one its mandate is for.")
    at = _time(call.get("created_at"), "call.created_at")
    signed_at = _time(signed.get("decided_at"), "mandate's decided_at")
    return (
        f"{call.get('agent_id')} called {action.get('tool')} on {action.get('device')}, {at}, "
        f"under mandate {call.get('mandate_id')}, which {_who(proven.claims, signed)} at {signed_at}; "
        f"{_disclosed_words(arguments, hidden)}"
    )


# ---- what each proof says ----------------------------------------------------------------------------


def approval_proof(
    signer: Signer,
    approval: Approval,
    signed: SignedDecision,
    entry: tuple[int, str],
    disclose: bool,
    mandate: bool = False,
) -> str:
    """The proof of a decided approval: a call's planned action, each argument disclosable; with
    ``mandate``, a mandate's, whose arguments are its bounds, always disclosed."""
    assert approval.decided_at is not None
    decision = approval.status.value
    text = signed_text(
        approval.sign.format,
        approval.approval_id,
        decision,
        approval.kind,
        approval.subject,
        approval.sign.action_sha256,
        approval.sign.challenge,
        approval.sign.expires_at,
    )
    claims: dict[str, Any] = {
        "cnf": {"jwk": device_jwk(signed.alg, signed.public_key)},
        "approval": {
            "id": approval.approval_id,
            "kind": approval.kind,
            "subject": approval.subject,
            "decision": decision,
            "decided_at": when(approval.decided_at),
            "device_id": signed.device_id,
            "signed_text": text,
            "signature": _b64url(signed.raw_signature(text)),
            "alg": signed.alg,
        },
        "journal": {"seq": entry[0], "hash": entry[1]},
    }
    claims["action"] = {
        "tool": approval.tool,
        "device": approval.subject,
        "capability": approval.kind,
        "preview_sha256": preview_sha256(approval.preview),
    }
    vct = VCT_MANDATE if mandate else VCT_APPROVAL
    return signer.sign(vct, approval.user_id, claims, approval.arguments or {}, disclose or mandate)


def call_proof(
    signer: Signer, invocation: Invocation, mandate_proof: str, entry: tuple[int, str], disclose: bool
) -> str:
    """The proof of a call made under a mandate: the call, its journal entry, and the mandate's proof."""
    claims: dict[str, Any] = {
        "call": {
            "id": invocation.invocation_id,
            "agent_id": invocation.agent_id,
            "created_at": when(invocation.created_at),
            "mandate_id": invocation.mandate_id,
        },
        "action": {
            "tool": invocation.tool,
            "device": invocation.device_id,
            "capability": invocation.capability,
        },
        "journal": {"seq": entry[0], "hash": entry[1]},
        "mandate": {"proof": mandate_proof},
    }
    return signer.sign(VCT_CALL, invocation.user_id, claims, invocation.arguments, disclose)
