"""Vouching: a user who has a device already lets a new one in only from a device they have.

A claimed pairing opens an approval of kind ``device_pair`` on the user's approvers. Its planned action, like
any other approval's, is hashed into the signed text: the new device's id, name, kind, key fingerprint and
the comparison code the new device shows, so the person who compares the two codes signs what they saw.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from tapgate.domain.devices import Device

DEVICE_PAIR = "device_pair"
FINGERPRINT_HEX = 16
WHERE_TO_APPROVE = (
    "Approve this pairing on a device that approves for you: it shows the new device and its comparison code."
)
NEEDS_OPERATOR = (
    "This gateway requires a device signature, and this person has no device that approves for them yet: "
    "ask an operator to consent to this pairing."
)


def key_fingerprint(public_key_b64: str) -> str:
    """The first 16 hex digits of the SHA-256 of the device's public key (its SubjectPublicKeyInfo, DER)."""
    return hashlib.sha256(base64.b64decode(public_key_b64)).hexdigest()[:FINGERPRINT_HEX]


def pairing_arguments(device: Device, comparison_code: str) -> dict[str, Any]:
    """The planned action's arguments: what the person compares and signs."""
    return {
        "device_id": device.device_id,
        "name": device.name,
        "kind": device.kind,
        "key_fingerprint": key_fingerprint(device.public_key),
        "comparison_code": comparison_code,
    }


def pairing_preview(arguments: dict[str, Any]) -> dict[str, Any]:
    """``{kind, fields}`` like every approval's preview, from the planned action's arguments."""
    labels = [
        ("New device", "name"),
        ("Device id", "device_id"),
        ("Kind", "kind"),
        ("Key fingerprint", "key_fingerprint"),
        ("Comparison code", "comparison_code"),
    ]
    fields = [{"label": label, "value": arguments[key]} for label, key in labels]
    return {"kind": DEVICE_PAIR, "fields": fields}


def pairing_prompt(device: Device) -> str:
    return (
        f"A new device, {device.name}, asks to join your account. Approve only if it shows the same "
        "comparison code."
    )
