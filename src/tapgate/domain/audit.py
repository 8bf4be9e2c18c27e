"""The audit journal: one entry per decision, chained by SHA-256 so that any change is detectable.

Entries carry ids, outcomes and reasons, never a message body or argument text. Each tenant has its own
chain: entry ``n`` stores the hash of entry ``n-1`` and its own hash over its fields and that link.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tapgate.domain.errors import BrokenChain

GENESIS = "0" * 64

AuditValue = str | int | bool | None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """What a use case wants journalled; the store gives it a place in the chain."""

    action: str
    actor: str
    outcome: str = "ok"
    subject: str = ""
    reason: str = ""
    data: Mapping[str, AuditValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    tenant_id: str
    seq: int
    at: datetime
    action: str
    actor: str
    outcome: str
    subject: str
    reason: str
    data: Mapping[str, AuditValue]
    prev_hash: str
    hash: str

    def as_dict(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "at": self.at.isoformat(),
            "action": self.action,
            "actor": self.actor,
            "outcome": self.outcome,
            "subject": self.subject,
            "reason": self.reason,
            "data": dict(self.data),
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


def check_record(record: AuditRecord) -> None:
    """Refuse data that is not ids, numbers and flags (free text never goes in the journal)."""
    for key, value in record.data.items():
        if not isinstance(value, str | int | bool | type(None)):
            raise TypeError(f"audit data {key!r} must be an id, a number or a flag")
        if isinstance(value, str) and len(value) > 200:
            raise ValueError(f"audit data {key!r} is too long to be an id; free text never goes here")


def entry_hash(tenant_id: str, seq: int, at: datetime, record: AuditRecord, prev_hash: str) -> str:
    body = {
        "tenant_id": tenant_id,
        "seq": seq,
        "at": at.isoformat(),
        "action": record.action,
        "actor": record.actor,
        "outcome": record.outcome,
        "subject": record.subject,
        "reason": record.reason,
        "data": dict(record.data),
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{prev_hash}\n{canonical}".encode()).hexdigest()


def chain_entry(tenant_id: str, seq: int, at: datetime, record: AuditRecord, prev_hash: str) -> AuditEntry:
    """Place ``record`` after the entry whose hash is ``prev_hash``."""
    check_record(record)
    return AuditEntry(
        tenant_id=tenant_id,
        seq=seq,
        at=at,
        action=record.action,
        actor=record.actor,
        outcome=record.outcome,
        subject=record.subject,
        reason=record.reason,
        data=dict(record.data),
        prev_hash=prev_hash,
        hash=entry_hash(tenant_id, seq, at, record, prev_hash),
    )


def verify_chain(tenant_id: str, entries: Iterable[AuditEntry], after: tuple[int, str] = (0, GENESIS)) -> int:
    """Return the number of the last entry verified in order (how many the chain holds), ``entries``
    following the entry ``after`` names by its number and hash (none: the chain's start); raise
    BrokenChain at the first that does not."""
    expected_seq, prev = after[0] + 1, after[1]
    for entry in entries:
        if entry.seq != expected_seq:
            raise BrokenChain(tenant_id, expected_seq, "is missing")
        if entry.prev_hash != prev:
            raise BrokenChain(tenant_id, entry.seq, "does not link to the entry before it")
        record = AuditRecord(
            entry.action, entry.actor, entry.outcome, entry.subject, entry.reason, entry.data
        )
        if entry_hash(tenant_id, entry.seq, entry.at, record, prev) != entry.hash:
            raise BrokenChain(tenant_id, entry.seq, "was altered after it was written")
        prev, expected_seq = entry.hash, expected_seq + 1
    return expected_seq - 1
