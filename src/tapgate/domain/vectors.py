"""Approval-signature test vectors: a JSON document another implementation can check itself against.

The document reads::

    {"format": …,
     "approval": {"id", "kind", "subject", "prompt", "preview", "planned_action"},
     "sign": {"format", "challenge", "expires_at", "action_sha256", "algorithms"},
     "cases": [{"alg", "decision", "payload", "public_key", "signature", "signature_raw"?}]}

Each case's payload is the signed text rebuilt from the approval and sign fields; ``signature`` is base64
(DER for P-256) and ``signature_raw`` the same P-256 signature as r‖s. ``planned_action`` is the exact
object whose canonical JSON hashes to ``action_sha256``; when it and ``preview`` are present they are
checked too, so a client can test its canonical JSON as well as its signatures.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from tapgate.domain.approvals import (
    APPROVAL_FORMAT,
    Decision,
    PrivateKey,
    action_sha256,
    canonical_json,
    new_sign_block,
    preview_sha256,
    sign_decision,
    signed_text,
    verify_decision,
)
from tapgate.domain.errors import InvalidInput, SignatureRefused, VectorsError
from tapgate.domain.ids import new_id
from tapgate.domain.keys import KeyAlgorithm, canonical_public_key

__all__ = ["VectorsError", "check_vectors", "generate_vectors"]

_TTL_SECONDS = 3600


def generate_vectors(
    now: datetime,
    format: str = APPROVAL_FORMAT,
    p256_key: ec.EllipticCurvePrivateKey | None = None,
    ed25519_key: ed25519.Ed25519PrivateKey | None = None,
) -> dict[str, Any]:
    """A vectors document for one approval: both algorithms × both decisions, signed with the given keys
    (fresh ones by default), its sign block expiring an hour after ``now``."""
    approval_id, kind, device_id, tool = new_id("apr"), "sms_send", "ana-phone", "device__ana_phone__sms_send"
    text = "Olá! Chego às 19h 👋"
    arguments = {"to": "+351912345678", "text": text}
    preview = {
        "kind": kind,
        "fields": [{"label": "To", "value": "+351 912 345 678"}, {"label": "Text", "value": text}],
    }
    sign = new_sign_block(action_sha256(tool, device_id, kind, arguments, preview), now, _TTL_SECONDS, format)
    keys: list[tuple[KeyAlgorithm, PrivateKey]] = [
        (KeyAlgorithm.P256, p256_key or ec.generate_private_key(ec.SECP256R1())),
        (KeyAlgorithm.ED25519, ed25519_key or ed25519.Ed25519PrivateKey.generate()),
    ]
    cases = []
    for alg, key in keys:
        for decision in Decision:
            payload = signed_text(
                format,
                approval_id,
                decision,
                kind,
                device_id,
                sign.action_sha256,
                sign.challenge,
                sign.expires_at,
            )
            case = {
                "alg": str(alg),
                "decision": str(decision),
                "payload": payload,
                "public_key": canonical_public_key(key.public_key()),
                "signature": sign_decision(key, payload),
            }
            if alg is KeyAlgorithm.P256:
                case["signature_raw"] = sign_decision(key, payload, raw=True)
            cases.append(case)
    approval = {
        "id": approval_id,
        "kind": kind,
        "subject": device_id,
        "prompt": "Send this text to +351 912 345 678?",
        "preview": preview,
        "planned_action": {
            "tool": tool,
            "device": device_id,
            "capability": kind,
            "arguments": arguments,
            "preview_sha256": preview_sha256(preview),
        },
    }
    return {"format": format, "approval": approval, "sign": sign.as_json(), "cases": cases}


def check_vectors(doc: Mapping[str, Any]) -> int:
    """Check every case of a vectors document, under whatever format name it carries; return how many.

    Raises VectorsError at the first case whose payload is not exactly the text rebuilt from the approval
    and sign fields, or whose ``signature`` (and ``signature_raw``, when present) does not verify, and
    (with ``case`` None) when the document lacks a part or its planned action does not hash as it says."""
    if not isinstance(doc, Mapping):
        raise VectorsError(None, "the document is not a JSON object")
    approval = _fields(doc.get("approval"), "the approval", ("id", "kind", "subject"))
    sign = _fields(
        doc.get("sign"),
        "the sign block",
        ("format", "challenge", "expires_at", "action_sha256", "algorithms"),
    )
    cases = doc.get("cases")
    if not isinstance(cases, list) or not cases:
        raise VectorsError(None, "the document needs a non-empty 'cases' list")
    if not isinstance(sign["algorithms"], list):
        raise VectorsError(None, "the sign block's algorithms is not a list")
    if doc.get("format") != sign["format"]:
        raise VectorsError(None, "the document's format and its sign block's format differ")
    _check_planned_action(approval, sign["action_sha256"])
    for index, case in enumerate(cases):
        _check_case(index, case, approval, sign)
    return len(cases)


def _fields(obj: object, what: str, names: Sequence[str], case: int | None = None) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise VectorsError(case, f"{what} is missing or not an object")
    for name in names:
        if name not in obj:
            raise VectorsError(case, f"{what} lacks {name!r}")
    return obj


def _check_planned_action(approval: Mapping[str, Any], action: object) -> None:
    planned, preview = approval.get("planned_action"), approval.get("preview")
    try:
        if planned is not None and hashlib.sha256(canonical_json(planned)).hexdigest() != action:
            raise VectorsError(
                None, "action_sha256 is not the SHA-256 of the planned action's canonical JSON"
            )
        if (
            isinstance(planned, Mapping)
            and preview is not None
            and preview_sha256(preview) != planned.get("preview_sha256")
        ):
            raise VectorsError(None, "preview_sha256 is not the SHA-256 of the preview's canonical JSON")
    except InvalidInput as e:
        raise VectorsError(None, f"the planned action or the preview is not JSON: {e.message}") from None


def _check_case(index: int, obj: object, approval: Mapping[str, Any], sign: Mapping[str, Any]) -> None:
    case = _fields(obj, "the case", ("alg", "decision", "payload", "public_key", "signature"), index)
    if case["alg"] not in sign["algorithms"]:
        raise VectorsError(index, f"alg {case['alg']!r} is not one the sign block offers")
    try:
        expected = signed_text(
            sign["format"], approval["id"], case["decision"], approval["kind"], approval["subject"],
            sign["action_sha256"], sign["challenge"], sign["expires_at"],
        )  # fmt: skip
    except InvalidInput as e:
        raise VectorsError(index, f"the payload cannot be rebuilt: {e.message}") from None
    if case["payload"] != expected:
        raise VectorsError(index, "payload is not the text rebuilt from the approval and sign fields")
    for field in ("signature", "signature_raw"):
        if field in case:
            try:
                verify_decision(case["alg"], case["public_key"], expected, case[field])
            except SignatureRefused as e:
                raise VectorsError(index, f"{field} does not verify: {e.detail}") from None
