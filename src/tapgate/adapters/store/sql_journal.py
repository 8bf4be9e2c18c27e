"""The audit journal and the agent's event stream on SQLite and PostgreSQL, numbered under the tenant's
head row; every statement names its tenant."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import select, update

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.sql_base import Repo, insert_into
from tapgate.domain.audit import AuditEntry, AuditRecord, chain_entry
from tapgate.domain.errors import StorageError
from tapgate.domain.events import Event, EventValue


class SqlEvents(Repo):
    async def erase_bodies(self, type: str, fields: Sequence[str], before: datetime) -> int:
        c = t.events.c
        rows = await self.conn.execute(
            select(c.seq, c.data).where(c.tenant_id == self.tenant_id, c.type == type, c.created_at < before)
        )
        changed = 0
        for row in rows.all():
            data = json.loads(row.data)
            if data.get("erased"):
                continue
            data.update(dict.fromkeys(fields, ""), erased=True)
            await self.conn.execute(
                update(t.events)
                .where(c.tenant_id == self.tenant_id, c.seq == row.seq)
                .values(data=json.dumps(data, sort_keys=True))
            )
            changed += 1
        return changed

    async def append(self, user_id: str, type: str, data: Mapping[str, EventValue], at: datetime) -> int:
        seq = await self.conn.scalar(q.NEXT_EVENT, {"tenant": self.tenant_id})
        if seq is None:
            raise StorageError(f"Tenant {self.tenant_id!r} has no event counter; was it created?")
        await self.conn.execute(
            insert_into(t.events),
            {
                "tenant_id": self.tenant_id,
                "seq": seq,
                "user_id": user_id,
                "type": type,
                "data": json.dumps(dict(data), sort_keys=True),
                "created_at": at,
            },
        )
        return int(seq)

    async def read(self, user_id: str, after: int, limit: int) -> Sequence[Event]:
        rows = await self.conn.execute(
            q.EVENTS_AFTER, {"tenant": self.tenant_id, "user": user_id, "after": after, "limit": limit}
        )
        return [Event(r.tenant_id, r.seq, r.user_id, r.type, json.loads(r.data), r.created_at) for r in rows]


class SqlJournal(Repo):
    async def head(self) -> tuple[int, str] | None:
        row = (await self.conn.execute(q.AUDIT_HEAD, {"tenant": self.tenant_id})).first()
        return None if row is None else (int(row.seq), str(row.hash))

    async def append(self, record: AuditRecord, at: datetime) -> AuditEntry:
        head = (await self.conn.execute(q.AUDIT_HEAD_LOCKED, {"tenant": self.tenant_id})).first()
        if head is None:
            raise StorageError(f"Tenant {self.tenant_id!r} has no audit journal; was it created?")
        entry = chain_entry(self.tenant_id, head.seq + 1, at, record, head.hash)
        await self.conn.execute(
            insert_into(t.audit_entries),
            {
                "tenant_id": entry.tenant_id,
                "seq": entry.seq,
                "at": entry.at,
                "action": entry.action,
                "actor": entry.actor,
                "outcome": entry.outcome,
                "subject": entry.subject,
                "reason": entry.reason,
                "data": json.dumps(dict(entry.data), sort_keys=True),
                "prev_hash": entry.prev_hash,
                "hash": entry.hash,
            },
        )
        await self.conn.execute(
            q.MOVE_AUDIT_HEAD, {"tenant": self.tenant_id, "seq": entry.seq, "hash": entry.hash}
        )
        return entry

    async def read(self, after: int, limit: int) -> Sequence[AuditEntry]:
        c = t.audit_entries.c
        rows = await self.conn.execute(
            select(t.audit_entries)
            .where(c.tenant_id == self.tenant_id, c.seq > after)
            .order_by(c.seq)
            .limit(limit)
        )
        return [
            AuditEntry(
                tenant_id=r.tenant_id,
                seq=r.seq,
                at=r.at,
                action=r.action,
                actor=r.actor,
                outcome=r.outcome,
                subject=r.subject,
                reason=r.reason,
                data=json.loads(r.data),
                prev_hash=r.prev_hash,
                hash=r.hash,
            )
            for r in rows
        ]
