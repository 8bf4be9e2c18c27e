"""The console's sign-ins and sessions on SQLite and PostgreSQL; every statement names its tenant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from tapgate.adapters.store import tables as t
from tapgate.adapters.store.sql_base import Repo
from tapgate.domain.console import ConsoleSession, SignIn, SignInKind, SignInStatus
from tapgate.domain.errors import Conflict


def _sign_in(r: Any) -> SignIn:
    return SignIn(
        tenant_id=r.tenant_id,
        sign_in_id=r.sign_in_id,
        kind=SignInKind(r.kind),
        secret_hash=r.secret_hash,
        status=SignInStatus(r.status),
        created_at=r.created_at,
        expires_at=r.expires_at,
        user_id=r.user_id,
        approval_id=r.approval_id,
        browser=r.browser,
    )


class SqlSignIns(Repo):
    async def add(self, sign_in: SignIn) -> None:
        try:
            await self.conn.execute(
                insert(t.console_sign_ins),
                {
                    "tenant_id": sign_in.tenant_id,
                    "sign_in_id": sign_in.sign_in_id,
                    "kind": sign_in.kind.value,
                    "secret_hash": sign_in.secret_hash,
                    "status": sign_in.status.value,
                    "created_at": sign_in.created_at,
                    "expires_at": sign_in.expires_at,
                    "user_id": sign_in.user_id,
                    "approval_id": sign_in.approval_id,
                    "browser": sign_in.browser,
                },
            )
        except IntegrityError as e:
            raise Conflict("That sign-in exists already.") from e

    async def get(self, sign_in_id: str) -> SignIn | None:
        c = t.console_sign_ins.c
        row = (
            await self.conn.execute(
                select(t.console_sign_ins).where(c.tenant_id == self.tenant_id, c.sign_in_id == sign_in_id)
            )
        ).first()
        return None if row is None else _sign_in(row)

    async def save(self, sign_in: SignIn, was: SignInStatus) -> bool:
        c = t.console_sign_ins.c
        changed = await self.conn.execute(
            update(t.console_sign_ins)
            .where(c.tenant_id == self.tenant_id, c.sign_in_id == sign_in.sign_in_id, c.status == was.value)
            .values(status=sign_in.status.value, user_id=sign_in.user_id, approval_id=sign_in.approval_id)
        )
        return bool(changed.rowcount)


def _session(r: Any) -> ConsoleSession:
    return ConsoleSession(
        tenant_id=r.tenant_id,
        session_id=r.session_id,
        user_id=r.user_id,
        secret_hash=r.secret_hash,
        via=SignInKind(r.via),
        created_at=r.created_at,
        expires_at=r.expires_at,
        browser=r.browser,
        revoked_at=r.revoked_at,
    )


class SqlConsoleSessions(Repo):
    async def add(self, session: ConsoleSession) -> None:
        await self.conn.execute(
            insert(t.console_sessions),
            {
                "tenant_id": session.tenant_id,
                "session_id": session.session_id,
                "user_id": session.user_id,
                "secret_hash": session.secret_hash,
                "via": session.via.value,
                "created_at": session.created_at,
                "expires_at": session.expires_at,
                "browser": session.browser,
                "revoked_at": session.revoked_at,
            },
        )

    async def get(self, session_id: str) -> ConsoleSession | None:
        c = t.console_sessions.c
        row = (
            await self.conn.execute(
                select(t.console_sessions).where(c.tenant_id == self.tenant_id, c.session_id == session_id)
            )
        ).first()
        return None if row is None else _session(row)

    async def list_for(self, user_id: str) -> Sequence[ConsoleSession]:
        c = t.console_sessions.c
        rows = await self.conn.execute(
            select(t.console_sessions)
            .where(c.tenant_id == self.tenant_id, c.user_id == user_id)
            .order_by(c.created_at.desc())
            .limit(50)
        )
        return [_session(r) for r in rows]

    async def revoke(self, session_id: str, at: datetime) -> bool:
        c = t.console_sessions.c
        changed = await self.conn.execute(
            update(t.console_sessions)
            .where(c.tenant_id == self.tenant_id, c.session_id == session_id, c.revoked_at.is_(None))
            .values(revoked_at=at)
        )
        return bool(changed.rowcount)
