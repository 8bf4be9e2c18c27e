"""Device public keys: P-256 and Ed25519, in the encodings phones produce.

A key arrives as base64 of an X.509 SubjectPublicKeyInfo (Android's ``publicKey.encoded``), a SEC1 point
(P-256, compressed or not) or 32 raw bytes (Ed25519). It is checked (on the curve, right length, the
algorithm it claims) and kept in one canonical form: base64 of its SubjectPublicKeyInfo.
"""

from __future__ import annotations

import base64
import binascii
from enum import StrEnum

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from tapgate.domain.errors import InvalidInput

PublicKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


class KeyAlgorithm(StrEnum):
    P256 = "p256"
    ED25519 = "ed25519"


def decode_base64(value: str, field: str) -> bytes:
    """Strict base64 (standard or URL-safe alphabet, padding optional). Raises InvalidInput."""
    text = value.strip()
    if not text or any(c.isspace() for c in text):
        raise InvalidInput(field, f"{field} must be base64 without spaces or line breaks.")
    text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidInput(field, f"{field} is not valid base64.") from e


def load_public_key(alg: KeyAlgorithm | str, encoded: str, field: str = "public_key") -> PublicKey:
    """The key ``encoded`` (base64) for ``alg``; raise InvalidInput naming ``field`` if it is not one."""
    try:
        algorithm = KeyAlgorithm(alg)
    except ValueError:
        raise InvalidInput("alg", "alg must be 'p256' or 'ed25519'.") from None
    raw = decode_base64(encoded, field)
    if algorithm is KeyAlgorithm.ED25519:
        return _ed25519(raw, field)
    return _p256(raw, field)


def _spki(raw: bytes) -> object | None:
    if not raw.startswith(b"\x30"):
        return None
    try:
        return serialization.load_der_public_key(raw)
    except (ValueError, UnsupportedAlgorithm):
        return None


def _ed25519(raw: bytes, field: str) -> ed25519.Ed25519PublicKey:
    if len(raw) == 32:
        try:
            return ed25519.Ed25519PublicKey.from_public_bytes(raw)
        except ValueError as e:
            raise InvalidInput(field, f"{field} is not an Ed25519 public key.") from e
    key = _spki(raw)
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    raise InvalidInput(
        field, f"{field} must be 32 raw bytes or a SubjectPublicKeyInfo of an Ed25519 key (alg ed25519)."
    )


def _p256(raw: bytes, field: str) -> ec.EllipticCurvePublicKey:
    key = _spki(raw)
    if key is None and raw[:1] in (b"\x02", b"\x03", b"\x04"):
        try:
            key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
        except ValueError as e:
            raise InvalidInput(field, f"{field} is not a point on the P-256 curve.") from e
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise InvalidInput(
        field, f"{field} must be a SubjectPublicKeyInfo or SEC1 point of a P-256 key (alg p256)."
    )


def canonical_public_key(key: PublicKey) -> str:
    """Base64 of the key's SubjectPublicKeyInfo: the one form tapgate stores."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode()
