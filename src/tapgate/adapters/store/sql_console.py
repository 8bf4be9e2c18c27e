"""The console's sign-ins and sessions on SQLite and PostgreSQL; every statement names its tenant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, or_, select, update
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
        address=r.address,
        approver_uid=r.approver_uid,
        approver_id=r.approver_id,
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
                    "address": sign_in.address,
                    "approver_uid": sign_in.approver_uid,
                    "approver_id": sign_in.approver_id,
                },
            )
        except IntegrityError as e:
            raise Conflict("That sign-in exists already.") from e

    async def get(self, sign_in_id: str) -> SignIn | None:
        c = t.console_sign_ins.c
        row = (
            await self.conn.execute(self.scoped(select(t.console_sign_ins)).where(c.sign_in_id == sign_in_id))
        ).first()
        return None if row is None else _sign_in(row)

    async def save(self, sign_in: SignIn, was: SignInStatus) -> bool:
        c = t.console_sign_ins.c
        changed = await self.conn.execute(
            self.scoped(update(t.console_sign_ins))
            .where(c.sign_in_id == sign_in.sign_in_id, c.status == was.value)
            .values(
                status=sign_in.status.value,
                user_id=sign_in.user_id,
                approval_id=sign_in.approval_id,
                approver_uid=sign_in.approver_uid,
                approver_id=sign_in.approver_id,
            )
        )
        return bool(changed.rowcount)

    async def delete_ended(self, now: datetime, limit: int) -> int:
        c = t.console_sign_ins.c
        ended = (
            self.scoped(select(c.sign_in_id))
            .where(c.expires_at < now)
            .order_by(c.expires_at)
            .limit(limit)
            .scalar_subquery()
        )
        done = await self.conn.execute(self.scoped(delete(t.console_sign_ins)).where(c.sign_in_id.in_(ended)))
        return int(done.rowcount)


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
        approver_uid=r.approver_uid,
        approver_id=r.approver_id,
        last_used_at=r.last_used_at,
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
                "approver_uid": session.approver_uid,
                "approver_id": session.approver_id,
                "last_used_at": session.last_used_at,
            },
        )

    async def get(self, session_id: str) -> ConsoleSession | None:
        c = t.console_sessions.c
        row = (
            await self.conn.execute(self.scoped(select(t.console_sessions)).where(c.session_id == session_id))
        ).first()
        return None if row is None else _session(row)

    async def list_for(self, user_id: str) -> Sequence[ConsoleSession]:
        c = t.console_sessions.c
        rows = await self.conn.execute(
            self.scoped(select(t.console_sessions))
            .where(c.user_id == user_id)
            .order_by(c.created_at.desc())
            .limit(50)
        )
        return [_session(r) for r in rows]

    async def revoke(self, session_id: str, at: datetime) -> bool:
        c = t.console_sessions.c
        changed = await self.conn.execute(
            self.scoped(update(t.console_sessions))
            .where(c.session_id == session_id, c.revoked_at.is_(None))
            .values(revoked_at=at)
        )
        return bool(changed.rowcount)

    async def live(self, now: datetime, user_id: str | None = None) -> Sequence[ConsoleSession]:
        c = t.console_sessions.c
        query = self.scoped(select(t.console_sessions)).where(c.revoked_at.is_(None), c.expires_at > now)
        if user_id is not None:
            query = query.where(c.user_id == user_id)
        rows = await self.conn.execute(query.order_by(c.created_at, c.session_id))
        return [_session(r) for r in rows]

    async def revoke_signed_by(self, approver_uid: str, at: datetime) -> Sequence[str]:
        c = t.console_sessions.c
        found = await self.conn.execute(
            self.scoped(select(c.session_id)).where(c.approver_uid == approver_uid, c.revoked_at.is_(None))
        )
        ids = [r.session_id for r in found]
        if ids:
            await self.conn.execute(
                self.scoped(update(t.console_sessions))
                .where(c.session_id.in_(ids), c.revoked_at.is_(None))
                .values(revoked_at=at)
            )
        return ids

    async def touch(self, session_id: str, at: datetime) -> None:
        c = t.console_sessions.c
        await self.conn.execute(
            self.scoped(update(t.console_sessions))
            .where(c.session_id == session_id, or_(c.last_used_at.is_(None), c.last_used_at < at))
            .values(last_used_at=at)
        )
