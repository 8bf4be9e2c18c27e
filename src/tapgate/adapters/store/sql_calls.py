"""Sessions, invocations, approvals and forwarded messages on SQLite and PostgreSQL; every statement names
its tenant."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.sql_base import Repo, insert_into
from tapgate.domain.approvals import SignBlock
from tapgate.domain.devices import DeviceStatus, Presence
from tapgate.domain.errors import DuplicateInvocation
from tapgate.domain.inbox import Approval, ApprovalStatus, erased_preview
from tapgate.domain.ingest import Receipt, Triage
from tapgate.domain.invocations import OPEN, Invocation, Status
from tapgate.domain.keys import KeyAlgorithm
from tapgate.domain.sessions import Session, SessionKind


class SqlSessions(Repo):
    async def get(self, user_id: str, session_id: str) -> Session | None:
        values = {"tenant": self.tenant_id, "user": user_id, "session": session_id}
        r = (await self.conn.execute(q.SESSION, values)).first()
        if r is None:
            return None
        return Session(
            tenant_id=r.tenant_id,
            user_id=r.user_id,
            session_id=r.session_id,
            agent_id=r.agent_id,
            kind=SessionKind(r.kind),
            attended=r.attended,
            created_at=r.created_at,
            updated_at=r.updated_at,
            latest_device_uid=r.latest_device_uid,
            latest_capabilities=tuple(json.loads(r.latest_capabilities)),
            phone_device_uid=r.phone_device_uid,
        )

    async def save(self, session: Session) -> None:
        c = t.sessions.c
        values = {
            "agent_id": session.agent_id,
            "kind": session.kind.value,
            "attended": session.attended,
            "updated_at": session.updated_at,
            "latest_device_uid": session.latest_device_uid,
            "latest_capabilities": json.dumps(list(session.latest_capabilities)),
            "phone_device_uid": session.phone_device_uid,
        }
        changed = await self.conn.execute(
            self.scoped(update(t.sessions))
            .where(c.user_id == session.user_id, c.session_id == session.session_id)
            .values(values)
        )
        if changed.rowcount == 0:
            await self.conn.execute(
                insert_into(t.sessions),
                self.owned(
                    dict(
                        tenant_id=session.tenant_id,
                        user_id=session.user_id,
                        session_id=session.session_id,
                        created_at=session.created_at,
                        **values,
                    )
                ),
            )

    async def add_message(
        self, session: Session, device_uid: str | None, capabilities: Sequence[str], at: datetime
    ) -> int:
        last = await self.conn.scalar(
            q.LAST_MESSAGE, {"tenant": self.tenant_id, "user": session.user_id, "session": session.session_id}
        )
        seq = int(last or 0) + 1
        await self.conn.execute(
            insert_into(t.session_messages),
            self.owned(
                {
                    "user_id": session.user_id,
                    "session_id": session.session_id,
                    "seq": seq,
                    "device_uid": device_uid,
                    "capabilities": json.dumps(list(capabilities)),
                    "created_at": at,
                }
            ),
        )
        return seq


def _presence(r: Any) -> Presence | None:
    """The device's presence in a row that carries it (``device_status``, ``device_link_until``,
    ``device_push_kind``); None if the device is gone."""
    if r.device_status is None:
        return None
    return Presence(DeviceStatus(r.device_status), r.device_link_until, r.device_push_kind is not None)


def _invocation(r: Any) -> Invocation:
    return Invocation(
        tenant_id=r.tenant_id,
        invocation_id=r.invocation_id,
        user_id=r.user_id,
        agent_id=r.agent_id,
        device_uid=r.device_uid,
        device_id=r.device_id,
        tool=r.tool,
        capability=r.capability,
        arguments=json.loads(r.arguments),
        arguments_sha256=r.arguments_sha256,
        status=Status(r.status),
        created_at=r.created_at,
        expires_at=r.expires_at,
        session_id=r.session_id,
        run_id=r.run_id,
        origin=r.origin,
        delivered_at=r.delivered_at,
        resolved_at=r.resolved_at,
        message=r.message,
        late_status=r.late_status,
        late_message=r.late_message,
        late_at=r.late_at,
        reason=r.reason,
        binding_code=r.binding_code,
        approval_id=r.approval_id,
        mandate_id=r.mandate_id,
    )


class SqlInvocations(Repo):
    async def erase_texts(self, before: datetime, capabilities: Sequence[str]) -> int:
        c = t.invocations.c
        texts = c.capability.in_(list(capabilities))  # calls whose arguments hold a message
        result = await self.conn.execute(
            self.scoped(update(t.invocations))
            .where(
                c.created_at < before,
                c.status.notin_(list(OPEN)),
                or_(and_(texts, c.arguments != "{}"), c.message.is_not(None), c.late_message.is_not(None)),
            )
            .values(arguments=case((texts, "{}"), else_=c.arguments), message=None, late_message=None)
        )
        return int(result.rowcount or 0)

    async def add(self, invocation: Invocation) -> None:
        i = invocation
        row = {
            "tenant_id": i.tenant_id,
            "invocation_id": i.invocation_id,
            "user_id": i.user_id,
            "agent_id": i.agent_id,
            "device_uid": i.device_uid,
            "device_id": i.device_id,
            "tool": i.tool,
            "capability": i.capability,
            "arguments": json.dumps(dict(i.arguments), sort_keys=True),
            "arguments_sha256": i.arguments_sha256,
            "status": i.status.value,
            "created_at": i.created_at,
            "expires_at": i.expires_at,
            "session_id": i.session_id,
            "run_id": i.run_id,
            "origin": i.origin,
            "delivered_at": i.delivered_at,
            "resolved_at": i.resolved_at,
            "message": i.message,
            "reason": i.reason,
            "binding_code": i.binding_code,
            "approval_id": i.approval_id,
            "mandate_id": i.mandate_id,
        }
        await self._insert(
            t.invocations, row, f"Invocation {i.invocation_id!r} exists already.", DuplicateInvocation
        )

    async def get(self, user_id: str, invocation_id: str) -> Invocation | None:
        values = {"tenant": self.tenant_id, "user": user_id, "id": invocation_id}
        r = (await self.conn.execute(q.INVOCATION, values)).first()
        return None if r is None else _invocation(r)

    async def get_with_presence(
        self, user_id: str, invocation_id: str
    ) -> tuple[Invocation | None, Presence | None]:
        values = {"tenant": self.tenant_id, "user": user_id, "id": invocation_id}
        r = (await self.conn.execute(q.INVOCATION_WITH_PRESENCE, values)).first()
        if r is None:
            return None, None
        return _invocation(r), _presence(r)

    async def pending_for(self, device_uid: str, limit: int) -> Sequence[Invocation]:
        rows = await self.conn.execute(
            q.PENDING_FOR, {"tenant": self.tenant_id, "uid": device_uid, "limit": limit}
        )
        return [_invocation(r) for r in rows]

    async def open_for(self, device_uid: str) -> Sequence[Invocation]:
        rows = await self.conn.execute(q.OPEN_FOR, {"tenant": self.tenant_id, "uid": device_uid})
        return [_invocation(r) for r in rows]

    async def mark_delivered(
        self, user_id: str, device_uid: str, invocation_ids: Sequence[str], at: datetime
    ) -> None:
        values = {"tenant": self.tenant_id, "user": user_id, "uid": device_uid, "at": at}
        if len(invocation_ids) == 1:  # the usual case, on the driver
            await self.conn.execute(q.MARK_ONE_DELIVERED, values | {"id": invocation_ids[0]})
        elif invocation_ids:  # the same statement for each (executemany: one round trip on PostgreSQL)
            await self.conn.execute(q.MARK_ONE_DELIVERED, [values | {"id": i} for i in invocation_ids])

    async def resolve(self, invocation: Invocation) -> bool:
        changed = await self.conn.execute(
            q.RESOLVE,
            {
                "tenant": self.tenant_id,
                "user": invocation.user_id,
                "id": invocation.invocation_id,
                "status": invocation.status.value,
                "resolved_at": invocation.resolved_at,
                "message": invocation.message,
                "reason": invocation.reason,
            },
        )
        return bool(changed.rowcount)

    async def answer(
        self,
        user_id: str,
        invocation_id: str,
        device_uid: str,
        status: Status,
        message: str | None,
        at: datetime,
    ) -> Invocation | None:
        values = {
            "tenant": self.tenant_id,
            "user": user_id,
            "id": invocation_id,
            "uid": device_uid,
            "status": status.value,
            "message": message,
            "at": at,
        }
        r = (await self.conn.execute(q.ANSWER, values)).first()
        return None if r is None else _invocation(r)

    async def answer_with_presence(
        self,
        user_id: str,
        invocation_id: str,
        device_uid: str,
        status: Status,
        message: str | None,
        at: datetime,
    ) -> tuple[Invocation, Presence | None] | None:
        values = {
            "tenant": self.tenant_id,
            "user": user_id,
            "id": invocation_id,
            "uid": device_uid,
            "status": status.value,
            "message": message,
            "at": at,
        }
        r = (await self.conn.execute(q.ANSWER_WITH_PRESENCE, values)).first()
        if r is None:
            return None
        return _invocation(r), _presence(r)

    async def proceed(self, invocation: Invocation) -> bool:
        c = t.invocations.c
        changed = await self.conn.execute(
            self.scoped(update(t.invocations))
            .where(
                c.user_id == invocation.user_id,
                c.invocation_id == invocation.invocation_id,
                c.status == Status.AWAITING_APPROVAL.value,
            )
            .values(status=invocation.status.value, expires_at=invocation.expires_at)
        )
        return bool(changed.rowcount)

    async def count_confirming(self, user_id: str) -> int:
        count = await self.conn.scalar(q.COUNT_CONFIRMING, {"tenant": self.tenant_id, "user": user_id})
        return int(count or 0)

    async def add_late_report(
        self, user_id: str, invocation_id: str, status: str, message: str | None, at: datetime
    ) -> bool:
        c = t.invocations.c
        changed = await self.conn.execute(
            self.scoped(update(t.invocations))
            .where(c.user_id == user_id, c.invocation_id == invocation_id, c.late_status.is_(None))
            .values(late_status=status, late_message=message, late_at=at)
        )
        return bool(changed.rowcount)

    async def due(self, now: datetime, limit: int) -> Sequence[Invocation]:
        c = t.invocations.c
        rows = await self.conn.execute(
            self.scoped(select(t.invocations))
            .where(c.status.in_(OPEN), c.expires_at <= now)
            .order_by(c.expires_at)
            .limit(limit)
        )
        return [_invocation(r) for r in rows]

    async def history(
        self, user_id: str, limit: int, agent_id: str | None = None, status: str | None = None
    ) -> Sequence[Invocation]:
        c = t.invocations.c
        query = self.scoped(select(t.invocations)).where(c.user_id == user_id)
        if agent_id is not None:
            query = query.where(c.agent_id == agent_id)
        if status is not None:
            query = query.where(c.status == status)
        rows = await self.conn.execute(query.order_by(c.created_at.desc()).limit(limit))
        return [_invocation(r) for r in rows]


def _approval(r: Any) -> Approval:
    return Approval(
        tenant_id=r.tenant_id,
        approval_id=r.approval_id,
        user_id=r.user_id,
        agent_id=r.agent_id,
        invocation_id=r.invocation_id,
        kind=r.kind,
        subject=r.subject,
        prompt=r.prompt,
        preview=json.loads(r.preview),
        sign=SignBlock(
            format=r.sign_format,
            challenge=r.challenge,
            expires_at=r.sign_expires_at,
            action_sha256=r.action_sha256,
            algorithms=tuple(KeyAlgorithm(a) for a in r.algorithms.split()),
        ),
        binding_code=r.binding_code,
        status=ApprovalStatus(r.status),
        created_at=r.created_at,
        expires_at=r.expires_at,
        decided_at=r.decided_at,
        decided_by=r.decided_by,
        tool=r.tool or "",
        arguments=None if r.arguments is None else json.loads(r.arguments),
    )


class SqlApprovals(Repo):
    async def add(self, approval: Approval) -> None:
        a = approval
        await self.conn.execute(
            insert_into(t.approvals),
            self.owned(
                {
                    "tenant_id": a.tenant_id,
                    "approval_id": a.approval_id,
                    "user_id": a.user_id,
                    "agent_id": a.agent_id,
                    "invocation_id": a.invocation_id,
                    "kind": a.kind,
                    "subject": a.subject,
                    "prompt": a.prompt,
                    "preview": json.dumps(dict(a.preview), sort_keys=True),
                    "sign_format": a.sign.format,
                    "challenge": a.sign.challenge,
                    "sign_expires_at": a.sign.expires_at,
                    "action_sha256": a.sign.action_sha256,
                    "algorithms": " ".join(a.sign.algorithms),
                    "binding_code": a.binding_code,
                    "status": a.status.value,
                    "created_at": a.created_at,
                    "expires_at": a.expires_at,
                    "decided_at": a.decided_at,
                    "decided_by": a.decided_by,
                    "tool": a.tool or None,
                    "arguments": None
                    if a.arguments is None
                    else json.dumps(dict(a.arguments), sort_keys=True),
                }
            ),
        )

    async def get(self, approval_id: str) -> Approval | None:
        c = t.approvals.c
        r = (
            await self.conn.execute(self.scoped(select(t.approvals)).where(c.approval_id == approval_id))
        ).first()
        return None if r is None else _approval(r)

    async def pending_for(self, user_id: str) -> Sequence[Approval]:
        c = t.approvals.c
        rows = await self.conn.execute(
            self.scoped(select(t.approvals))
            .where(c.user_id == user_id, c.status == ApprovalStatus.PENDING.value)
            .order_by(c.created_at, c.approval_id)
        )
        return [_approval(r) for r in rows]

    async def count_pending(self, user_id: str) -> int:
        c = t.approvals.c
        count = await self.conn.scalar(
            self.scoped(select(func.count()), over=t.approvals).where(
                c.user_id == user_id, c.status == ApprovalStatus.PENDING.value, c.invocation_id.is_not(None)
            )
        )
        return int(count or 0)

    async def erase_texts(self, before: datetime, kinds: Sequence[str]) -> int:
        c = t.approvals.c
        changed = 0
        for kind in kinds:
            result = await self.conn.execute(
                self.scoped(update(t.approvals))
                .where(c.created_at < before, c.kind == kind, c.arguments.is_not(None))
                .values(arguments=None, preview=json.dumps(erased_preview(kind), sort_keys=True))
            )
            changed += int(result.rowcount or 0)
        return changed

    async def decide(self, approval: Approval) -> bool:
        changed = await self.conn.execute(
            q.DECIDE,
            {
                "tenant": self.tenant_id,
                "id": approval.approval_id,
                "status": approval.status.value,
                "decided_at": approval.decided_at,
                "by": approval.decided_by,
            },
        )
        return bool(changed.rowcount)


class SqlIngests(Repo):
    async def receipt(self, device_uid: str, channel: str, digest: str) -> Receipt | None:
        values = {"tenant": self.tenant_id, "uid": device_uid, "via": channel, "digest": digest}
        r = (await self.conn.execute(q.RECEIPT, values)).first()
        return None if r is None else Receipt(r.receipt_id, r.session_id)

    async def add_receipt(
        self,
        device_uid: str,
        channel: str,
        digest: str,
        receipt: Receipt,
        received_at: datetime,
        at: datetime,
    ) -> None:
        row = {
            "tenant_id": self.tenant_id,
            "device_uid": device_uid,
            "channel": channel,
            "digest": digest,
            "receipt_id": receipt.receipt_id,
            "received_at": received_at,
            "accepted_at": at,
            "session_id": receipt.session_id,
        }
        await self._insert(t.ingest_receipts, row, "This message was received already.")

    async def take(self, device_uid: str, day: str, cap: int) -> bool:
        today = {"tenant": self.tenant_id, "uid": device_uid, "today": day}
        for _ in range(3):
            # The row lock makes the check and the count one step: the cap is exact under concurrency.
            counted = await self.conn.execute(q.COUNT_INGEST, {**today, "cap": cap})
            if counted.rowcount:
                return True
            current = await self.conn.scalar(q.INGEST_COUNT, today)
            if current is not None:
                if current >= cap:
                    return False
                continue  # the day's row appeared between the two statements: count on it
            if cap <= 0:
                return False
            try:
                async with self.conn.begin_nested():
                    await self.conn.execute(
                        insert_into(t.ingest_counters),
                        self.owned({"device_uid": device_uid, "day": day, "count": 1}),
                    )
            except IntegrityError:
                continue  # another message made the day's row first
            return True
        return False

    async def triage(self, device_uid: str, channel: str) -> Triage | None:
        values = {"tenant": self.tenant_id, "uid": device_uid, "via": channel}
        r = (await self.conn.execute(q.TRIAGE, values)).first()
        return None if r is None else Triage(r.session_id, r.last_message_at)

    async def set_triage(
        self, device_uid: str, channel: str, user_id: str, triage: Triage, replace: bool
    ) -> None:
        if replace:
            values = {
                "tenant": self.tenant_id,
                "uid": device_uid,
                "via": channel,
                "session": triage.session_id,
                "at": triage.last_message_at,
            }
            await self.conn.execute(q.MOVE_TRIAGE, values)
            return
        row = {
            "tenant_id": self.tenant_id,
            "device_uid": device_uid,
            "channel": channel,
            "user_id": user_id,
            "session_id": triage.session_id,
            "last_message_at": triage.last_message_at,
        }
        await self._insert(t.triage_sessions, row, "The triage session is pinned already.")
