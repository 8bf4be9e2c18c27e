"""Pairing: a person lets a new device in by a single-use code, a comparison code and their consent.

The code reads ``tgp_<tenant>_<pairing id>_<secret>`` with 128 random bits of secret; it is good for one
claim within its window. The device that claims it gets a 6-digit comparison code that the person must
type on their side to consent, so a device that intercepted the code cannot be let in unnoticed.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from tapgate.domain.errors import Conflict, Gone, NotFound

PAIRING_TTL = timedelta(minutes=10)
MAX_COMPARISON_ATTEMPTS = 5
_CODE = re.compile(r"^tgp_([a-z0-9]+(?:-[a-z0-9]+)*)_([0-9a-f]{16})_([0-9a-f]{32})$")


class PairingStatus(StrEnum):
    OPEN = "open"  # waiting for a device to claim the code
    AWAITING_CONSENT = "awaiting_consent"
    CONFIRMED = "confirmed"
    DECLINED = "declined"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Pairing:
    tenant_id: str
    pairing_id: str
    user_id: str
    code_hash: str
    status: PairingStatus
    created_at: datetime
    expires_at: datetime
    code: str | None = None  # kept only while open, to draw the QR code; wiped at the claim
    device_uid: str | None = None
    comparison_code: str | None = None
    attempts: int = 0
    decided_at: datetime | None = None

    def current(self, now: datetime) -> Pairing:
        """This pairing as of ``now``: an undecided one past its window has expired."""
        undecided = self.status in (PairingStatus.OPEN, PairingStatus.AWAITING_CONSENT)
        if undecided and now >= self.expires_at:
            return replace(self, status=PairingStatus.EXPIRED, code=None, decided_at=self.expires_at)
        return self


@dataclass(frozen=True, slots=True)
class PairingCode:
    tenant_id: str
    pairing_id: str
    secret: str


def new_pairing(tenant_id: str, user_id: str, now: datetime) -> Pairing:
    pairing_id, secret = secrets.token_hex(8), secrets.token_hex(16)
    code = f"tgp_{tenant_id}_{pairing_id}_{secret}"
    return Pairing(
        tenant_id, pairing_id, user_id, _hash(secret), PairingStatus.OPEN, now, now + PAIRING_TTL, code=code
    )


def parse_code(code: str) -> PairingCode:
    """Raises NotFound for anything that is not a pairing code (no hint why)."""
    match = _CODE.fullmatch(code) if isinstance(code, str) else None
    if match is None:
        raise NotFound("This pairing code is not valid; ask for a new one.")
    return PairingCode(*match.groups())


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def claim(pairing: Pairing, code: PairingCode, device_uid: str, now: datetime) -> Pairing:
    """The device's claim of an open pairing. Raises NotFound, Gone (expired) or Conflict (used)."""
    if not hmac.compare_digest(_hash(code.secret), pairing.code_hash):
        raise NotFound("This pairing code is not valid; ask for a new one.")
    pairing = pairing.current(now)
    if pairing.status is PairingStatus.EXPIRED:
        raise Gone("This pairing code has expired; ask for a new one.")
    if pairing.status is not PairingStatus.OPEN:
        raise Conflict("This pairing code was used already; ask for a new one.")
    comparison = f"{secrets.randbelow(10**6):06d}"
    return replace(
        pairing,
        status=PairingStatus.AWAITING_CONSENT,
        code=None,
        device_uid=device_uid,
        comparison_code=comparison,
    )


def consent(pairing: Pairing, comparison_code: str, approved: bool, now: datetime) -> Pairing:
    """The person's answer. The code is taken as it is shown, with or without its space ("262 925"). A
    wrong comparison code counts an attempt and raises Forbidden; after MAX_COMPARISON_ATTEMPTS the pairing
    is declined. Raises Gone (expired) or Conflict (not waiting)."""
    comparison_code = "".join(comparison_code.split())
    pairing = pairing.current(now)
    if pairing.status is PairingStatus.EXPIRED:
        raise Gone("This pairing has expired; start a new one.")
    if pairing.status is not PairingStatus.AWAITING_CONSENT:
        raise Conflict(f"This pairing is {pairing.status.value}; it is not waiting for consent.")
    if not approved:
        return replace(pairing, status=PairingStatus.DECLINED, decided_at=now)
    assert pairing.comparison_code is not None
    if not hmac.compare_digest(comparison_code.encode(), pairing.comparison_code.encode()):
        attempts = pairing.attempts + 1
        if attempts >= MAX_COMPARISON_ATTEMPTS:
            return replace(pairing, status=PairingStatus.DECLINED, attempts=attempts, decided_at=now)
        return replace(pairing, attempts=attempts)
    return replace(pairing, status=PairingStatus.CONFIRMED, decided_at=now)
