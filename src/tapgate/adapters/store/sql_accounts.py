"""Tenants, users, their credentials, and the agents a person paused, on SQLite and PostgreSQL; every
statement names its tenant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, bindparam, or_, select, update

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.sql_base import Repo, insert_into
from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.audit import GENESIS
from tapgate.domain.principals import Scope, TokenKind


class SqlTenants(Repo):
    async def add(self, tenant: Tenant) -> None:
        row = {"tenant_id": tenant.tenant_id, "name": tenant.name, "created_at": tenant.created_at}
        await self._insert(t.tenants, row, f"A tenant named {tenant.tenant_id!r} exists; pick another name.")
        await self.conn.execute(
            insert_into(t.audit_heads), self.owned({"tenant_id": tenant.tenant_id, "seq": 0, "hash": GENESIS})
        )

    async def get(self) -> Tenant | None:
        row = (await self.conn.execute(self.scoped(select(t.tenants)))).first()
        if row is None:
            return None
        return Tenant(row.tenant_id, row.name, row.created_at, row.served_url, row.moved_at)

    async def set_served(self, url: str, moved_at: datetime | None) -> None:
        values: dict[str, object] = {"served_url": url}
        if moved_at is not None:
            values["moved_at"] = moved_at
        await self.conn.execute(self.scoped(update(t.tenants)).values(**values))


class SqlUsers(Repo):
    async def add(self, user: User) -> None:
        row = {
            "tenant_id": user.tenant_id,
            "user_id": user.user_id,
            "display_name": user.display_name,
            "created_at": user.created_at,
        }
        await self._insert(t.users, row, f"User {user.user_id!r} exists already.")

    async def get(self, user_id: str) -> User | None:
        c = t.users.c
        row = (await self.conn.execute(self.scoped(select(t.users)).where(c.user_id == user_id))).first()
        return None if row is None else User(row.tenant_id, row.user_id, row.display_name, row.created_at)

    async def list(self) -> Sequence[User]:
        c = t.users.c
        rows = await self.conn.execute(self.scoped(select(t.users)).order_by(c.user_id))
        return [User(row.tenant_id, row.user_id, row.display_name, row.created_at) for row in rows]


class SqlCredentials(Repo):
    async def add(self, credential: Credential) -> None:
        row = {
            "tenant_id": credential.tenant_id,
            "credential_id": credential.credential_id,
            "kind": credential.kind.value,
            "secret_hash": credential.secret_hash,
            "scopes": " ".join(sorted(credential.scopes)),
            "user_id": credential.user_id,
            "agent_id": credential.agent_id,
            "device_uid": credential.device_uid,
            "require_device_signature": credential.require_device_signature,
            "created_at": credential.created_at,
            "revoked_at": credential.revoked_at,
            "expires_at": credential.expires_at,
            "last_used_at": credential.last_used_at,
            "console_session_id": credential.console_session_id,
            "agent_name": credential.agent_name,
        }
        await self._insert(t.credentials, row, "That credential exists already.")

    async def get(self, credential_id: str) -> Credential | None:
        row = (await self.conn.execute(q.CREDENTIAL, {"tenant": self.tenant_id, "id": credential_id})).first()
        if row is None:
            return None
        return _credential(row)

    async def revoke_device(self, device_uid: str, at: datetime) -> None:
        c = t.credentials.c
        await self.conn.execute(
            self.scoped(update(t.credentials))
            .where(c.device_uid == device_uid, c.revoked_at.is_(None))
            .values(revoked_at=at)
        )

    async def list(self, user_id: str | None = None, kind: TokenKind | None = None) -> Sequence[Credential]:
        c = t.credentials.c
        query = self.scoped(select(t.credentials)).where(c.revoked_at.is_(None))
        if user_id is not None:
            query = query.where(c.user_id == user_id)
        if kind is not None:
            query = query.where(c.kind == kind.value)
        rows = await self.conn.execute(query.order_by(c.created_at, c.credential_id))
        return [_credential(row) for row in rows]

    async def revoke(self, credential_id: str, at: datetime) -> bool:
        c = t.credentials.c
        done = await self.conn.execute(
            self.scoped(update(t.credentials))
            .where(c.credential_id == credential_id, c.revoked_at.is_(None))
            .values(revoked_at=at)
        )
        return bool(done.rowcount)

    async def touch(self, used: Mapping[str, datetime]) -> None:
        if not used:
            return
        c = t.credentials.c
        at: BindParameter[datetime] = bindparam("at")
        statement = (
            self.scoped(update(t.credentials))
            .where(c.credential_id == bindparam("id"), or_(c.last_used_at.is_(None), c.last_used_at < at))
            .values(last_used_at=at)
        )
        # One statement for the whole batch (executemany): a process that just took 10,000 links writes
        # their tokens' use in one round trip, not 10,000.
        await self.conn.execute(statement, [{"id": i, "at": when} for i, when in used.items()])


def _credential(row: Any) -> Credential:
    return Credential(
        tenant_id=row.tenant_id,
        credential_id=row.credential_id,
        kind=TokenKind(row.kind),
        secret_hash=row.secret_hash,
        scopes=frozenset(Scope(s) for s in row.scopes.split()),
        created_at=row.created_at,
        user_id=row.user_id,
        agent_id=row.agent_id,
        device_uid=row.device_uid,
        require_device_signature=row.require_device_signature,
        revoked_at=row.revoked_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        console_session_id=row.console_session_id,
        agent_name=row.agent_name,
    )


class SqlPauses(Repo):
    async def pause(self, user_id: str, agent_id: str, until: datetime) -> None:
        c = t.agent_pauses.c
        changed = await self.conn.execute(
            self.scoped(update(t.agent_pauses))
            .where(c.user_id == user_id, c.agent_id == agent_id)
            .values(until=until)
        )
        if not changed.rowcount:
            await self.conn.execute(
                insert_into(t.agent_pauses),
                self.owned({"user_id": user_id, "agent_id": agent_id, "until": until}),
            )

    async def paused_until(self, user_id: str, agent_id: str) -> datetime | None:
        until = await self.conn.scalar(
            q.PAUSED_UNTIL, {"tenant": self.tenant_id, "user": user_id, "agent": agent_id}
        )
        return until if isinstance(until, datetime) else None
