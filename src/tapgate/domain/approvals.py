"""Approval signatures: the planned action's hash, the sign block, the signed text, and its verification.

A device decides an approval by signing, with its enrolled key, eight lines of UTF-8 text that name the
approval, the decision, the hash of the planned action and the server's challenge and expiry (see
``signed_text``). The same layout verifies under any format name, so vectors from another deployment check.

Choices that are part of the protocol:

- Signatures arrive as base64, standard (``+/``) or URL-safe (``-_``) alphabet, padding optional, and
  otherwise strict: no whitespace, no mixed alphabets, no stray bits. A browser's base64url and Android's
  ``Base64.NO_WRAP`` both work; what is verified is the bytes, so accepting both alphabets costs nothing.
- P-256 is ECDSA over SHA-256, as strict DER or as raw 64-byte r‖s (what WebCrypto gives). High-S signatures
  are accepted: Android's Keystore, Java and WebCrypto do not normalise S, so refusing them would refuse
  half of all honest signatures; a second valid encoding gains nothing, since the signature is no
  identifier and an approval is decided once.
- Ed25519 is exactly the 64-byte signature.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from tapgate.domain.errors import InvalidInput, SignatureRefused
from tapgate.domain.keys import KeyAlgorithm, PublicKey, load_public_key
from tapgate.domain.text import unsafe_character

__all__ = [
    "APPROVAL_FORMAT",
    "Decision",
    "PrivateKey",
    "SignBlock",
    "SignatureRefused",
    "action_sha256",
    "canonical_json",
    "new_sign_block",
    "preview_sha256",
    "sign_decision",
    "signed_text",
    "verify_decision",
]

APPROVAL_FORMAT = "tapgate-approval-v1"

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey

# What str.splitlines() splits on; U+2028 and U+2029 are not controls, so unsafe_character lets them by.
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_STANDARD_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_URLSAFE_B64 = re.compile(r"[A-Za-z0-9_-]+={0,2}")
_MAX_SIGNATURE_CHARS = 200  # a P-256 DER signature is at most 72 bytes, 96 characters of base64
_P256_ORDER_BYTES = 32


class Decision(StrEnum):
    APPROVED = "approved"
    DENIED = "denied"


def canonical_json(obj: object) -> bytes:
    """``obj`` (JSON data: dicts with string keys, lists, strings, numbers, booleans, None) as canonical
    JSON: keys sorted, no spaces, non-ASCII kept as UTF-8. Raises InvalidInput for anything else."""
    _check_json(obj)
    try:
        text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.encode()
    except (TypeError, ValueError) as e:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        raise InvalidInput("json", f"The value cannot be canonical JSON: {e}.") from e


def _check_json(obj: object) -> None:
    # json.dumps would silently turn 1, True or None keys into strings, so two values could hash alike.
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise InvalidInput("json", f"A JSON object key must be a string, not {key!r}.")
            _check_json(value)
    elif isinstance(obj, list | tuple):
        for value in obj:
            _check_json(value)


def preview_sha256(preview: Mapping[str, object]) -> str:
    """SHA-256 (lower-case hex) of the preview's canonical JSON; raises InvalidInput if it is not JSON."""
    return hashlib.sha256(canonical_json(preview)).hexdigest()


def action_sha256(
    tool: str, device_id: str, capability: str, arguments: Mapping[str, object], preview: Mapping[str, object]
) -> str:
    """SHA-256 (lower-case hex) of the planned action's canonical JSON, which is exactly the object
    ``{"arguments": …, "capability": …, "device": <device_id>, "preview_sha256": <preview_sha256(preview)>,
    "tool": …}``. These five key names are protocol: a device or another implementation recomputes them.
    Raises InvalidInput if the arguments or the preview are not JSON."""
    planned = {
        "tool": tool,
        "device": device_id,
        "capability": capability,
        "arguments": arguments,
        "preview_sha256": preview_sha256(preview),
    }
    return hashlib.sha256(canonical_json(planned)).hexdigest()


@dataclass(frozen=True, slots=True)
class SignBlock:
    """What a device needs, besides the approval id and its own decision, to build the text it signs."""

    format: str
    challenge: str
    expires_at: int
    action_sha256: str
    algorithms: tuple[KeyAlgorithm, ...] = (KeyAlgorithm.P256, KeyAlgorithm.ED25519)

    def as_json(self) -> dict[str, object]:
        return {
            "format": self.format,
            "challenge": self.challenge,
            "expires_at": self.expires_at,
            "action_sha256": self.action_sha256,
            "algorithms": [str(alg) for alg in self.algorithms],
        }


def new_sign_block(
    action_sha256: str, now: datetime, ttl_seconds: int, format: str = APPROVAL_FORMAT
) -> SignBlock:
    """A sign block with a fresh 128-bit challenge that expires ``ttl_seconds`` after ``now``.

    Raises ValueError for a naive ``now`` or a ttl that is not a positive number of seconds."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or ttl_seconds <= 0:
        raise ValueError("ttl_seconds must be a positive integer")
    return SignBlock(
        format=format,
        challenge=secrets.token_hex(16),
        expires_at=int(now.timestamp()) + ttl_seconds,
        action_sha256=action_sha256,
    )


def signed_text(
    format: str,
    approval_id: str,
    decision: Decision | str,
    kind: str,
    subject: str,
    action_sha256: str,
    challenge: str,
    expires: int,
) -> str:
    """The exact text a device signs: eight lines, each ending in ``\\n``::

        <format>
        approval: <approval_id>
        decision: approved|denied
        kind: <kind>
        subject: <subject, may be empty>
        action-sha256: <64 lower-case hex>
        challenge: <32 lower-case hex>
        expires: <expires, integer seconds since the epoch>

    Raises InvalidInput naming the field when a field is empty (only ``subject`` may be), holds a line
    break or a control, format or invisible character (so no field can forge a line), or has the wrong
    shape.
    """
    fields = {
        "format": format,
        "approval_id": approval_id,
        "decision": decision,
        "kind": kind,
        "subject": subject,
        "action_sha256": action_sha256,
        "challenge": challenge,
    }
    for name, value in fields.items():
        _check_line(name, value, may_be_empty=name == "subject")
    if decision not in (Decision.APPROVED, Decision.DENIED):
        raise InvalidInput("decision", "decision must be 'approved' or 'denied'.")
    if not _HEX64.fullmatch(action_sha256):
        raise InvalidInput("action_sha256", "action_sha256 must be 64 lower-case hex digits.")
    if not _HEX32.fullmatch(challenge):
        raise InvalidInput("challenge", "challenge must be 32 lower-case hex digits.")
    if isinstance(expires, bool) or not isinstance(expires, int) or expires < 0:
        raise InvalidInput("expires", "expires must be a whole number of seconds since the epoch.")
    return (
        f"{format}\n"
        f"approval: {approval_id}\n"
        f"decision: {decision}\n"
        f"kind: {kind}\n"
        f"subject: {subject}\n"
        f"action-sha256: {action_sha256}\n"
        f"challenge: {challenge}\n"
        f"expires: {expires}\n"
    )


def _check_line(field: str, value: object, may_be_empty: bool) -> None:
    if not isinstance(value, str):
        raise InvalidInput(field, f"{field} must be text.")
    if not value and not may_be_empty:
        raise InvalidInput(field, f"{field} must not be empty.")
    for ch in value:
        if ch in _LINE_BREAKS:
            raise InvalidInput(field, f"{field} contains U+{ord(ch):04X}, a line break; it must be one line.")
    bad = unsafe_character(value)
    if bad is not None:
        raise InvalidInput(
            field, f"{field} contains {bad}, a control, format or invisible character; remove it."
        )


def sign_decision(private_key: PrivateKey, payload: str, raw: bool = False) -> str:
    """Base64 of the device's signature over ``payload``: DER for P-256, or r‖s when ``raw``; Ed25519's
    64 bytes. What a device does; tapgate itself uses it for test vectors."""
    data = payload.encode()
    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return base64.b64encode(private_key.sign(data)).decode()
    der = private_key.sign(data, ec.ECDSA(hashes.SHA256()))
    if raw:
        r, s = decode_dss_signature(der)
        der = r.to_bytes(_P256_ORDER_BYTES) + s.to_bytes(_P256_ORDER_BYTES)
    return base64.b64encode(der).decode()


def verify_decision(
    alg: KeyAlgorithm | str, public_key: PublicKey | str, payload: str, signature: str
) -> None:
    """Return quietly when ``signature`` (base64) is ``public_key``'s signature over ``payload``, the signed
    text; ``public_key`` is a loaded key or base64 as ``keys.load_public_key`` reads it.

    Raises SignatureRefused for every reason it is not, with the reason in ``detail``."""
    try:
        algorithm = KeyAlgorithm(alg)
    except ValueError:
        raise SignatureRefused(f"unknown algorithm {alg!r}") from None
    key = _key(algorithm, public_key)
    try:
        data = payload.encode()
    except UnicodeEncodeError:
        raise SignatureRefused("payload is not UTF-8 text") from None
    blob = _signature_bytes(signature)
    if isinstance(key, ed25519.Ed25519PublicKey):
        if len(blob) != 64:
            raise SignatureRefused(f"wrong length: an Ed25519 signature is 64 bytes, not {len(blob)}")
        try:
            key.verify(blob, data)
        except InvalidSignature:
            raise SignatureRefused("bad signature") from None
        return
    for der in _p256_candidates(blob):
        try:
            key.verify(der, data, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            continue
        return
    raise SignatureRefused("bad signature")


def _key(algorithm: KeyAlgorithm, public_key: PublicKey | str) -> PublicKey:
    if isinstance(public_key, str):
        try:
            return _loaded(algorithm, public_key)
        except InvalidInput as e:
            raise SignatureRefused(f"public key: {e.message}") from None
    wanted = ed25519.Ed25519PublicKey if algorithm is KeyAlgorithm.ED25519 else ec.EllipticCurvePublicKey
    if not isinstance(public_key, wanted) or (
        isinstance(public_key, ec.EllipticCurvePublicKey) and not isinstance(public_key.curve, ec.SECP256R1)
    ):
        raise SignatureRefused(f"the key is not a {algorithm} key")
    return public_key


@functools.lru_cache(maxsize=4096)
def _loaded(algorithm: KeyAlgorithm, public_key: str) -> PublicKey:
    """A device's stored key, loaded once: the same text is always the same public key, and loading it
    costs about a quarter of a P-256 verify, which every decision would pay again."""
    return load_public_key(algorithm, public_key)


def _signature_bytes(signature: str) -> bytes:
    if not isinstance(signature, str) or not signature:
        raise SignatureRefused("empty signature")
    if len(signature) > _MAX_SIGNATURE_CHARS:
        raise SignatureRefused("too long")
    if _STANDARD_B64.fullmatch(signature):
        altchars = None
    elif _URLSAFE_B64.fullmatch(signature):
        altchars = b"-_"
    else:
        raise SignatureRefused("not base64")
    unpadded = signature.rstrip("=")
    if (unpadded != signature and len(signature) % 4) or len(unpadded) % 4 == 1:
        raise SignatureRefused("not base64: wrong padding")
    # The patterns and the padding check above let only well-formed base64 this far: it decodes.
    blob = base64.b64decode(unpadded + "=" * (-len(unpadded) % 4), altchars=altchars)
    if base64.b64encode(blob, altchars=altchars).decode().rstrip("=") != unpadded:
        raise SignatureRefused("not base64: stray bits in the last character")
    return blob


def _p256_candidates(blob: bytes) -> list[bytes]:
    """The DER signatures ``blob`` may be: itself if it is strict DER, r‖s re-encoded if it is 64 bytes.

    A 64-byte r‖s can, rarely, also parse as DER; both readings are then tried."""
    if blob[:1] == b"\x30" and len(blob) != 2 * _P256_ORDER_BYTES:
        return [_strict_der(blob)]
    candidates = []
    if len(blob) == 2 * _P256_ORDER_BYTES:
        if blob[:1] == b"\x30":
            with contextlib.suppress(SignatureRefused):
                candidates.append(_strict_der(blob))
        r = int.from_bytes(blob[:_P256_ORDER_BYTES])
        s = int.from_bytes(blob[_P256_ORDER_BYTES:])
        candidates.append(encode_dss_signature(r, s))
        return candidates
    raise SignatureRefused(f"wrong length: {len(blob)} bytes are neither a DER signature nor a 64-byte r‖s")


def _strict_der(blob: bytes) -> bytes:
    """``blob`` when it is exactly one DER signature. cryptography reads DER strictly: it refuses a long
    form where a short one fits, a needless leading zero, a negative number and anything after the end."""
    if _parses(blob):
        return blob
    # A DER signature's second byte is the length of what follows the first two (short form: a P-256
    # signature is at most 72 bytes). When that much parses, the rest was added after the signature.
    if _parses(blob[: 2 + int.from_bytes(blob[1:2])]):
        raise SignatureRefused("trailing bytes after the DER signature")
    raise SignatureRefused("malformed DER")


def _parses(blob: bytes) -> bool:
    try:
        decode_dss_signature(blob)
    except ValueError:
        return False
    return True
