"""A software WebAuthn authenticator for the server's own checks: it registers a P-256 credential with
attestation ``none`` and signs assertions the way a platform authenticator does (WebAuthn §6.1, §6.3.3),
with each flag, the counter, the challenge and the origin in the test's hands."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

UP, UV, AT = 0x01, 0x04, 0x40


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SoftAuthenticator:
    rp_id: str
    origin: str
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    credential_id: bytes = field(default_factory=lambda: os.urandom(16))
    count: int = 0

    @classmethod
    def rs256(cls, rp_id: str, origin: str) -> SoftAuthenticator:
        """One that makes an RSA (RS256) credential, as Windows Hello and some security keys do."""
        return cls(rp_id, origin, key=rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def _cose_key(self) -> bytes:
        if isinstance(self.key, rsa.RSAPrivateKey):
            rsa_numbers = self.key.public_key().public_numbers()
            n = rsa_numbers.n.to_bytes((rsa_numbers.n.bit_length() + 7) // 8, "big")
            e = rsa_numbers.e.to_bytes((rsa_numbers.e.bit_length() + 7) // 8, "big")
            return bytes(cbor2.dumps({1: 3, 3: -257, -1: n, -2: e}))
        numbers = self.key.public_key().public_numbers()
        return bytes(
            cbor2.dumps(
                {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")}
            )
        )

    def _client_data(self, kind: str, challenge: bytes, origin: str | None = None) -> bytes:
        return json.dumps(
            {
                "type": kind,
                "challenge": b64url(challenge),
                "origin": origin or self.origin,
                "crossOrigin": False,
            }
        ).encode()

    def register(self, challenge_b64url: str) -> dict[str, Any]:
        challenge = base64.urlsafe_b64decode(challenge_b64url + "=" * (-len(challenge_b64url) % 4))
        attested = (
            bytes(16) + struct.pack(">H", len(self.credential_id)) + self.credential_id + self._cose_key()
        )
        auth_data = (
            hashlib.sha256(self.rp_id.encode()).digest() + bytes([UP | UV | AT]) + struct.pack(">I", 0)
        )
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data + attested})
        return {
            "id": b64url(self.credential_id),
            "rawId": b64url(self.credential_id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(self._client_data("webauthn.create", challenge)),
                "attestationObject": b64url(bytes(attestation)),
            },
        }

    def assert_text(
        self,
        text: str,
        *,
        user_verified: bool = True,
        count: int | None = None,
        origin: str | None = None,
    ) -> dict[str, Any]:
        """An assertion whose challenge is the SHA-256 of ``text``; the counter moves on unless given."""
        if count is None:
            self.count += 1
            count = self.count
        challenge = hashlib.sha256(text.encode()).digest()
        client_data = self._client_data("webauthn.get", challenge, origin)
        flags = UP | (UV if user_verified else 0)
        auth_data = hashlib.sha256(self.rp_id.encode()).digest() + bytes([flags]) + struct.pack(">I", count)
        signed = auth_data + hashlib.sha256(client_data).digest()
        if isinstance(self.key, rsa.RSAPrivateKey):
            signature = self.key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return {
            "id": b64url(self.credential_id),
            "rawId": b64url(self.credential_id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "authenticatorData": b64url(auth_data),
                "signature": b64url(signature),
                "userHandle": None,
            },
        }
