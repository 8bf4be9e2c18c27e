"""Standing mandates in SQL: each person's signed bounds, and the one-statement spending of a use."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.sql_base import Repo
from tapgate.domain.mandates import Mandate, MandateStatus, utc_day

_m = t.mandates.c


def _mandate(r: Any) -> Mandate:
    return Mandate(
        tenant_id=r.tenant_id,
        mandate_id=r.mandate_id,
        user_id=r.user_id,
        agent_id=r.agent_id,
        tools=tuple(json.loads(r.tools)),
        constraints=json.loads(r.constraints),
        max_calls=r.max_calls,
        per_day=r.per_day,
        purpose=r.purpose,
        created_at=r.created_at,
        expires_at=r.expires_at,
        sign_until=r.sign_until,
        status=MandateStatus(r.status),
        approval_id=r.approval_id,
        used=r.used,
        used_today=r.used_today,
        day=r.day,
        decided_at=r.decided_at,
        decided_by=r.decided_by,
    )


class SqlMandates(Repo):
    async def add(self, mandate: Mandate) -> None:
        m = mandate
        row = {
            "tenant_id": m.tenant_id,
            "mandate_id": m.mandate_id,
            "user_id": m.user_id,
            "agent_id": m.agent_id,
            "tools": json.dumps(list(m.tools)),
            "constraints": json.dumps({k: dict(v) for k, v in m.constraints.items()}, sort_keys=True),
            "max_calls": m.max_calls,
            "per_day": m.per_day,
            "purpose": m.purpose,
            "created_at": m.created_at,
            "expires_at": m.expires_at,
            "sign_until": m.sign_until,
            "status": m.status.value,
            "approval_id": m.approval_id,
            "used": m.used,
            "used_today": m.used_today,
            "day": m.day,
            "decided_at": m.decided_at,
            "decided_by": m.decided_by,
        }
        await self._insert(t.mandates, row, f"Mandate {m.mandate_id!r} exists already.")

    async def get(self, mandate_id: str) -> Mandate | None:
        r = (
            await self.conn.execute(self.scoped(select(t.mandates)).where(_m.mandate_id == mandate_id))
        ).first()
        return None if r is None else _mandate(r)

    async def list_for(self, user_id: str) -> Sequence[Mandate]:
        rows = await self.conn.execute(
            self.scoped(select(t.mandates))
            .where(_m.user_id == user_id)
            .order_by(_m.created_at.desc(), _m.mandate_id.desc())
        )
        return [_mandate(r) for r in rows]

    async def live_for(self, user_id: str, now: datetime) -> Sequence[Mandate]:
        rows = await self.conn.execute(
            q.LIVE_MANDATES, {"tenant": self.tenant_id, "user": user_id, "now": now}
        )
        return sorted((_mandate(r) for r in rows), key=lambda m: (m.created_at, m.mandate_id), reverse=True)

    async def set_status(
        self, mandate_id: str, was: MandateStatus, status: MandateStatus, at: datetime, by: str
    ) -> bool:
        result = await self.conn.execute(
            self.scoped(update(t.mandates))
            .where(_m.mandate_id == mandate_id, _m.status == was.value)
            .values(status=status.value, decided_at=at, decided_by=by)
        )
        return bool(result.rowcount)

    async def ended(self, now: datetime, limit: int) -> Sequence[Mandate]:
        rows = await self.conn.execute(
            self.scoped(select(t.mandates))
            .where(_m.status == MandateStatus.ACTIVE.value, _m.expires_at <= now)
            .order_by(_m.expires_at, _m.mandate_id)
            .limit(limit)
        )
        return [_mandate(r) for r in rows]

    async def take(self, mandate_id: str, now: datetime) -> int | None:
        values = {"tenant": self.tenant_id, "id": mandate_id, "now": now, "day": utc_day(now)}
        if self.conn.dialect.name == "sqlite":  # no RETURNING there: see ``queries.SPEND_MANDATE``
            if not (await self.conn.execute(q.SPEND_MANDATE, values)).rowcount:
                return None
            return int(await self.conn.scalar(q.MANDATE_USED, values))
        used = (await self.conn.execute(q.TAKE_MANDATE, values)).scalar()
        return None if used is None else int(used)


__all__ = ["SqlMandates"]
