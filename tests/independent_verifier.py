"""A verifier of tapgate's proofs written from docs/proofs.md alone: it imports nothing of tapgate (only the
standard library and ``cryptography``), so a proof that passes here is checkable by anyone.

``check(proof, jwks)`` returns the proof's claims with the disclosed arguments put back, or raises
``Refused`` with the first check that failed."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


class Refused(Exception):
    pass


def _unb64(text: str) -> bytes:
    if not isinstance(text, str) or "=" in text:
        raise Refused("not base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as e:
        raise Refused("not base64url") from e
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode() != text:
        raise Refused("not canonical base64url")
    return data


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: SHA-256 of the required members in lexicographic order, no whitespace."""
    if jwk["kty"] == "OKP":
        members = {"crv": jwk["crv"], "kty": "OKP", "x": jwk["x"]}
    else:
        members = {"crv": jwk["crv"], "kty": "EC", "x": jwk["x"], "y": jwk["y"]}
    text = json.dumps(members, sort_keys=True, separators=(",", ":"))
    return _b64(hashlib.sha256(text.encode()).digest())


def canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def check(proof: str, jwks: dict[str, Any]) -> dict[str, Any]:
    parts = proof.strip().split("~")
    if len(parts) < 2 or parts[-1] != "":
        raise Refused("not an SD-JWT")
    jwt, disclosures = parts[0], parts[1:-1]
    # 1. The JWS against the JWKS key its kid names, with the key's thumbprint as kid.
    try:
        head64, body64, sig64 = jwt.split(".")
        header = json.loads(_unb64(head64))
        claims = json.loads(_unb64(body64))
    except ValueError as e:
        raise Refused("not a compact JWS") from e
    if header.get("alg") != "EdDSA" or header.get("typ") != "dc+sd-jwt":
        raise Refused("wrong alg or typ")
    keys = [k for k in jwks.get("keys", []) if k.get("kid") == header.get("kid")]
    if not keys or thumbprint(keys[0]) != header["kid"]:
        raise Refused("no such issuer key")
    issuer = ed25519.Ed25519PublicKey.from_public_bytes(_unb64(keys[0]["x"]))
    try:
        issuer.verify(_unb64(sig64), f"{head64}.{body64}".encode())
    except InvalidSignature as e:
        raise Refused("issuer signature") from e
    # 2. Each disclosure's digest is in action.arguments._sd.
    if claims.get("_sd_alg") != "sha-256":
        raise Refused("_sd_alg")
    action = claims["action"]
    digests = action.get("arguments", {}).get("_sd", [])
    arguments: dict[str, Any] = {}
    for d in disclosures:
        if _b64(hashlib.sha256(d.encode()).digest()) not in digests:
            raise Refused("a disclosure's digest is not in _sd")
        try:
            _salt, name, value = json.loads(_unb64(d))
        except ValueError as e:
            raise Refused("a disclosure is not [salt, name, value]") from e
        if name in arguments:
            raise Refused("an argument disclosed twice")
        arguments[name] = value
    if claims["vct"] == "tapgate-call-v1":
        mandate = check(claims["mandate"]["proof"], jwks)
        if mandate["vct"] != "tapgate-mandate-v1" or mandate["approval"]["decision"] != "approved":
            raise Refused("the call's mandate")
        if mandate["arguments"]["mandate_id"] != claims["call"]["mandate_id"]:
            raise Refused("another mandate")
        if action["tool"] not in mandate["arguments"]["tools"]:
            raise Refused("a tool the mandate does not list")
        return {**claims, "arguments": arguments, "hidden": len(digests) - len(arguments)}
    approval = claims["approval"]
    text = approval["signed_text"]
    # 3. The device signature over the signed text, with cnf.jwk.
    jwk = claims["cnf"]["jwk"]
    signature = _unb64(approval["signature"])
    try:
        if jwk["kty"] == "OKP":
            ed25519.Ed25519PublicKey.from_public_bytes(_unb64(jwk["x"])).verify(signature, text.encode())
        else:
            numbers = ec.EllipticCurvePublicNumbers(
                int.from_bytes(_unb64(jwk["x"]), "big"),
                int.from_bytes(_unb64(jwk["y"]), "big"),
                ec.SECP256R1(),
            )
            der = encode_dss_signature(
                int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            )
            numbers.public_key().verify(der, text.encode(), ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError) as e:
        raise Refused("device signature") from e
    lines = dict(line.split(": ", 1) for line in text.splitlines()[1:])
    # 4. With every argument disclosed, the canonical action's SHA-256 is the text's action-sha256.
    if len(arguments) == len(digests):
        planned = {**action, "arguments": arguments} if "arguments" in action else action
        if hashlib.sha256(canonical(planned)).hexdigest() != lines["action-sha256"]:
            raise Refused("action-sha256")
    # 5. The decision line, and the lines naming the approval, match the claims.
    if lines["decision"] != approval["decision"] or lines["approval"] != approval["id"]:
        raise Refused("decision line")
    if lines["kind"] != approval["kind"] or lines["subject"] != approval["subject"]:
        raise Refused("kind or subject line")
    return {**claims, "arguments": arguments, "hidden": len(digests) - len(arguments)}
