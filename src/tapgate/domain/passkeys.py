"""Passkeys: a decision that proves the person, not only the phone.

A device registers a WebAuthn credential: a platform authenticator (the phone's secure hardware), user
verification required, the relying party the host of ``public_url``, attestation ``none`` (tapgate does
not judge the authenticator's make, only that the same credential answers later). With
``require_user_verification`` on, every decision carries an assertion of that credential whose challenge
is the SHA-256 of the exact signed text of the decision, so the assertion is for this approval, this
decision and this action and no other; its user-verified flag must be set (Face ID, fingerprint or PIN
just now) and its sign count must move forward, or stay 0 for an authenticator that always reports 0
(as the WebAuthn specification allows).

The checks themselves are the ``webauthn`` library's (py_webauthn, Duo Labs): the client data's type,
challenge and origin, the relying party's hash, the flags, the counter and the signature over the COSE
key. Any refusal is one message to the client and a reason for the journal. The library is loaded at the
first ceremony, not with the server: about 7 MiB that a gateway without passkeys never needs.

The registration challenge is derived, not stored: the SHA-256 of the tenant and the device, so no row
waits between the two halves of a ceremony and any worker can finish it. It proves no freshness; it need
not, since registering already takes the device's own token and, with attestation ``none``, a replayed
registration can only register the same credential again for the same device.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from tapgate.domain.errors import InvalidInput, PasskeyRefused

__all__ = [
    "Passkey",
    "PasskeyRefused",
    "Relying",
    "Verified",
    "assertion_credential_id",
    "decision_challenge",
    "registration_challenge",
    "registration_options",
    "verify_assertion",
    "verify_registration",
]

RP_NAME = "tapgate"
# ES256 (P-256) and EdDSA, which phones' platform authenticators make, and RS256 (Windows Hello, some
# security keys).
ALGORITHMS = (-7, -8, -257)


@dataclass(frozen=True, slots=True)
class Passkey:
    tenant_id: str
    credential_id: str  # base64url, as WebAuthn writes it
    device_uid: str
    user_id: str
    public_key: str  # the COSE public key, base64url
    sign_count: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Relying:
    """The relying party: its id (the host of ``public_url``) and the origin the browser app runs on."""

    rp_id: str
    origin: str

    @classmethod
    def of(cls, public_url: str) -> Relying:
        parts = urlsplit(public_url)
        return cls(parts.hostname or "localhost", f"{parts.scheme}://{parts.netloc}")


@dataclass(frozen=True, slots=True)
class Verified:
    credential_id: str
    public_key: str
    sign_count: int


def decision_challenge(signed_text: str) -> bytes:
    """The challenge of a decision's assertion: the SHA-256 of the exact signed text."""
    return hashlib.sha256(signed_text.encode("utf-8")).digest()


def registration_challenge(tenant_id: str, device_uid: str) -> bytes:
    return hashlib.sha256(f"tapgate-passkey-registration-v1\n{tenant_id}\n{device_uid}\n".encode()).digest()


def registration_options(
    relying: Relying, tenant_id: str, device_uid: str, user_name: str, existing: list[str]
) -> dict[str, Any]:
    """The ``PublicKeyCredentialCreationOptions`` the browser app passes to ``navigator.credentials.create``
    (binary fields base64url)."""
    from webauthn.helpers import bytes_to_base64url

    return {
        "rp": {"id": relying.rp_id, "name": RP_NAME},
        "user": {
            "id": bytes_to_base64url(hashlib.sha256(f"{tenant_id}\n{device_uid}".encode()).digest()[:16]),
            "name": user_name,
            "displayName": user_name,
        },
        "challenge": bytes_to_base64url(registration_challenge(tenant_id, device_uid)),
        "pubKeyCredParams": [{"type": "public-key", "alg": alg} for alg in ALGORITHMS],
        "timeout": 120000,
        "authenticatorSelection": {
            "authenticatorAttachment": "platform",
            "userVerification": "required",
            "residentKey": "preferred",
        },
        "attestation": "none",
        "excludeCredentials": [{"type": "public-key", "id": c} for c in existing],
    }


def verify_registration(
    relying: Relying, tenant_id: str, device_uid: str, credential: dict[str, Any]
) -> Verified:
    """Raises InvalidInput (422) for a registration that does not verify."""
    from webauthn import verify_registration_response
    from webauthn.helpers import bytes_to_base64url
    from webauthn.helpers.cose import COSEAlgorithmIdentifier
    from webauthn.helpers.exceptions import WebAuthnException

    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=registration_challenge(tenant_id, device_uid),
            expected_rp_id=relying.rp_id,
            expected_origin=relying.origin,
            require_user_verification=True,
            supported_pub_key_algs=[COSEAlgorithmIdentifier(a) for a in ALGORITHMS],
        )
    except (WebAuthnException, ValueError, KeyError, TypeError) as e:
        raise InvalidInput(
            "credential",
            "The passkey could not be registered: the browser's answer does not verify for this device "
            f"and {relying.origin}. Try again from the app.",
        ) from e
    return Verified(
        bytes_to_base64url(verified.credential_id),
        bytes_to_base64url(verified.credential_public_key),
        verified.sign_count,
    )


def assertion_credential_id(assertion: dict[str, Any]) -> str:
    """The credential an assertion names. Raises PasskeyRefused for one without."""
    raw = assertion.get("id") if isinstance(assertion, dict) else None
    if not isinstance(raw, str) or not raw or len(raw) > 1400:
        raise PasskeyRefused("no credential id")
    return raw


def verify_assertion(relying: Relying, passkey: Passkey, signed_text: str, assertion: dict[str, Any]) -> int:
    """The new sign count of a good assertion for ``signed_text``. Raises PasskeyRefused."""
    from webauthn import verify_authentication_response
    from webauthn.helpers import base64url_to_bytes
    from webauthn.helpers.exceptions import InvalidAuthenticationResponse, WebAuthnException

    try:
        verified = verify_authentication_response(
            credential=assertion,
            expected_challenge=decision_challenge(signed_text),
            expected_rp_id=relying.rp_id,
            expected_origin=relying.origin,
            credential_public_key=base64url_to_bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=True,
        )
    except InvalidAuthenticationResponse as e:
        raise PasskeyRefused(str(e)[:200]) from e
    except (WebAuthnException, ValueError, KeyError, TypeError) as e:
        raise PasskeyRefused(f"malformed assertion: {type(e).__name__}") from e
    if not verified.user_verified:  # the library checks it too; kept so the rule reads here
        raise PasskeyRefused("user verification flag off")
    return int(verified.new_sign_count)
