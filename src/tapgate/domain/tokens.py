"""Bearer tokens: how they look, how they are stored (a hash), and how they are checked.

A token reads ``tg<kind letter>_<tenant>_<credential id>_<secret>``. The tenant and the credential id
say where to look; only the SHA-256 of the secret is stored and it is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from tapgate.domain.errors import Unauthenticated
from tapgate.domain.principals import TokenKind

_LETTER = {TokenKind.OPERATOR: "o", TokenKind.USER: "u", TokenKind.AGENT: "a", TokenKind.DEVICE: "d"}
_KIND = {letter: kind for kind, letter in _LETTER.items()}
_SHAPE = re.compile(r"^tg([ouad])_([a-z0-9]+(?:-[a-z0-9]+)*)_([0-9a-f]{16})_([0-9a-f]{64})$")


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A freshly minted token: ``token`` is shown once, ``secret_hash`` is what is kept."""

    token: str
    credential_id: str
    secret_hash: str


@dataclass(frozen=True, slots=True)
class PresentedToken:
    kind: TokenKind
    tenant_id: str
    credential_id: str
    secret: str


def issue_token(kind: TokenKind, tenant_id: str) -> IssuedToken:
    credential_id = secrets.token_hex(8)
    secret = secrets.token_hex(32)
    return IssuedToken(
        token=f"tg{_LETTER[kind]}_{tenant_id}_{credential_id}_{secret}",
        credential_id=credential_id,
        secret_hash=hash_secret(secret),
    )


def parse_token(token: str) -> PresentedToken:
    """Split a presented token; raise Unauthenticated if it does not have tapgate's shape."""
    match = _SHAPE.fullmatch(token)
    if match is None:
        raise Unauthenticated("The bearer token is not a tapgate token; send the token tapgate printed.")
    letter, tenant_id, credential_id, secret = match.groups()
    return PresentedToken(_KIND[letter], tenant_id, credential_id, secret)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_secret(presented: PresentedToken, stored_hash: str) -> None:
    """Raise Unauthenticated unless the presented secret hashes to ``stored_hash`` (constant time)."""
    if not hmac.compare_digest(hash_secret(presented.secret), stored_hash):
        raise Unauthenticated("The bearer token is not valid; it may have been revoked.")
