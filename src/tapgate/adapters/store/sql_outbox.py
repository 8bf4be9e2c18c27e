"""The push outbox on SQLite and PostgreSQL: rows queued with what they announce, claimed by workers,
finished once; every statement names its tenant."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, or_, select, text, update

from tapgate.adapters.store import tables as t
from tapgate.adapters.store.sql_base import Repo, insert_into
from tapgate.domain.notices import NOTICE_EVENTS
from tapgate.domain.push import KEPT, OutboxItem, OutboxStatus


def _outbox_row(item: OutboxItem) -> dict[str, Any]:
    payload = None
    if item.status in KEPT and (item.data or item.title or item.body):
        payload = json.dumps({"data": dict(item.data), "title": item.title, "body": item.body})
    return {
        "device_uid": item.device_uid,
        "user_id": item.user_id,
        "event": item.event,
        "subject_id": item.subject_id,
        "status": item.status.value,
        "attempts": item.attempts,
        "not_before": item.not_before,
        "claimed_until": item.claimed_until,
        "created_at": item.created_at,
        "finished_at": item.finished_at,
        "pushed_at": item.pushed_at,
        "payload": payload,  # a finished row keeps no notice words
        "last_error": item.last_error[:200] if item.last_error else None,
    }


def _outbox_item(r: Any) -> OutboxItem:
    payload = json.loads(r.payload) if r.payload else {}
    return OutboxItem(
        tenant_id=r.tenant_id,
        delivery_id=r.delivery_id,
        device_uid=r.device_uid,
        user_id=r.user_id,
        event=r.event,
        subject_id=r.subject_id,
        not_before=r.not_before,
        created_at=r.created_at,
        status=OutboxStatus(r.status),
        attempts=r.attempts,
        claimed_until=r.claimed_until,
        finished_at=r.finished_at,
        pushed_at=r.pushed_at,
        data=payload.get("data", {}),
        title=payload.get("title"),
        body=payload.get("body"),
        last_error=r.last_error,
    )


# Statuses of rows whose attempt reached (or may still reach) the person: the caps count them.
_PUSHED = (OutboxStatus.QUEUED.value, OutboxStatus.SENT.value)


class SqlOutbox(Repo):
    async def add(self, item: OutboxItem) -> None:
        await self.conn.execute(
            insert_into(t.push_outbox),
            self.owned({"tenant_id": item.tenant_id, "delivery_id": item.delivery_id, **_outbox_row(item)}),
        )

    async def get(self, delivery_id: str) -> OutboxItem | None:
        c = t.push_outbox.c
        r = (
            await self.conn.execute(self.scoped(select(t.push_outbox)).where(c.delivery_id == delivery_id))
        ).first()
        return None if r is None else _outbox_item(r)

    async def for_subject(self, subject_id: str) -> Sequence[OutboxItem]:
        c = t.push_outbox.c
        rows = await self.conn.execute(
            self.scoped(select(t.push_outbox))
            .where(c.subject_id == subject_id)
            .order_by(c.created_at, c.delivery_id)
        )
        return [_outbox_item(r) for r in rows]

    async def claim(self, now: datetime, until: datetime, limit: int) -> Sequence[OutboxItem]:
        c = t.push_outbox.c
        if self.conn.dialect.name == "postgresql":
            # Claims and cap decisions of one tenant take turns across processes until this commits.
            await self.conn.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _advisory_key("outbox", self.tenant_id)}
            )
        rows = (
            await self.conn.execute(
                self.scoped(select(t.push_outbox))
                .where(
                    c.status == OutboxStatus.QUEUED.value,
                    c.not_before <= now,
                    or_(c.claimed_until.is_(None), c.claimed_until <= now),
                )
                .order_by(c.not_before, c.created_at, c.delivery_id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        ).all()
        if not rows:
            return []
        await self.conn.execute(
            self.scoped(update(t.push_outbox))
            .where(c.delivery_id.in_([r.delivery_id for r in rows]))
            .values(claimed_until=until)
        )
        return [replace(_outbox_item(r), claimed_until=until) for r in rows]

    async def save(self, item: OutboxItem) -> None:
        c = t.push_outbox.c
        await self.conn.execute(
            self.scoped(update(t.push_outbox))
            .where(c.delivery_id == item.delivery_id)
            .values(_outbox_row(item))
        )

    async def pushed_since(self, user_id: str, since: datetime) -> int:
        c = t.push_outbox.c
        count = await self.conn.scalar(
            self.scoped(select(func.count()), over=t.push_outbox).where(
                c.user_id == user_id, c.pushed_at >= since, c.status.in_(_PUSHED)
            )
        )
        return int(count or 0)

    async def last_pushed(self, device_uid: str) -> datetime | None:
        c = t.push_outbox.c
        last = await self.conn.scalar(
            self.scoped(select(func.max(c.pushed_at))).where(
                c.device_uid == device_uid, c.status.in_(_PUSHED)
            )
        )
        return last if isinstance(last, datetime) else None

    async def next_due(self) -> datetime | None:
        c = t.push_outbox.c
        claimable = case(
            (c.claimed_until.is_not(None) & (c.claimed_until > c.not_before), c.claimed_until),
            else_=c.not_before,
        )
        due = await self.conn.scalar(
            self.scoped(select(func.min(claimable))).where(c.status == OutboxStatus.QUEUED.value)
        )
        return due if isinstance(due, datetime) else None

    async def notices_for(self, device_uid: str, since: datetime) -> Sequence[OutboxItem]:
        c = t.push_outbox.c
        rows = await self.conn.execute(
            self.scoped(select(t.push_outbox))
            .where(
                c.device_uid == device_uid,
                c.event.in_(sorted(NOTICE_EVENTS)),
                c.created_at >= since,
                or_(
                    c.status == OutboxStatus.HELD.value,
                    (c.status == OutboxStatus.QUEUED.value) & c.pushed_at.is_(None),
                ),
            )
            .order_by(c.created_at, c.delivery_id)
        )
        return [_outbox_item(r) for r in rows]

    async def linked(self, delivery_ids: Sequence[str], at: datetime) -> int:
        if not delivery_ids:
            return 0
        c = t.push_outbox.c
        result = await self.conn.execute(
            self.scoped(update(t.push_outbox))
            .where(c.delivery_id.in_(list(delivery_ids)), c.status.in_([s.value for s in KEPT]))
            .values(status=OutboxStatus.LINKED.value, finished_at=at, claimed_until=None, payload=None)
        )
        return int(result.rowcount or 0)

    async def expire_held(self, before: datetime) -> int:
        c = t.push_outbox.c
        result = await self.conn.execute(
            self.scoped(update(t.push_outbox))
            .where(c.status == OutboxStatus.HELD.value, c.created_at < before)
            .values(status=OutboxStatus.SKIPPED.value, finished_at=before, payload=None)
        )
        return int(result.rowcount or 0)


def _advisory_key(purpose: str, tenant_id: str) -> int:
    """A stable signed 64-bit key for pg_advisory_xact_lock."""
    digest = hashlib.sha256(f"tapgate:{purpose}:{tenant_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
