"""The Store over SQLAlchemy's async engine: SQLite (aiosqlite, WAL) and PostgreSQL (asyncpg, RLS).

Every query names its tenant; on PostgreSQL each transaction also sets ``app.tenant_id`` so that
row-level security hides every other tenant's rows even from a query that forgot to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import event, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from tapgate.adapters.store import tables as t
from tapgate.adapters.store.urls import engine_url
from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.audit import GENESIS, AuditEntry, AuditRecord, chain_entry
from tapgate.domain.errors import Conflict, StorageError
from tapgate.domain.principals import Scope, TokenKind

log = logging.getLogger(__name__)


class SqlStore:
    """One engine, one unit of work per transaction. Build it with :func:`open_sql_store`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        # SQLite has one writer at a time; queueing writers here keeps them off the busy-wait.
        self._sqlite_writer = None if self.is_postgres else asyncio.Lock()

    @contextlib.asynccontextmanager
    async def unit_of_work(self, tenant_id: str) -> AsyncIterator[SqlUnitOfWork]:
        async with contextlib.AsyncExitStack() as stack:
            if self._sqlite_writer is not None:
                await stack.enter_async_context(self._sqlite_writer)
            try:
                conn = await stack.enter_async_context(self.engine.begin())
                if self.is_postgres:
                    await conn.execute(
                        text("SELECT set_config('app.tenant_id', :tenant, true)"), {"tenant": tenant_id}
                    )
                yield SqlUnitOfWork(conn, tenant_id)
            except DBAPIError as e:
                # The driver's message can quote row contents: log its class only.
                log.error("storage error", extra={"error": type(e.orig).__name__})
                raise StorageError("The database failed; try again, and check the server's health.") from e

    async def tenant_ids(self) -> Sequence[str]:
        async with self.engine.connect() as conn:
            if self.is_postgres:
                rows = await conn.execute(text("SELECT tapgate_tenant_ids()"))
            else:
                rows = await conn.execute(select(t.tenants.c.tenant_id).order_by(t.tenants.c.tenant_id))
            return [r[0] for r in rows]

    async def ping(self) -> None:
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except (DBAPIError, OSError) as e:
            raise StorageError("The database cannot be reached.") from e

    async def close(self) -> None:
        await self.engine.dispose()


def open_sql_store(database_url: str, pool_size: int = 10) -> SqlStore:
    """An engine for ``database_url`` with tapgate's connection settings."""
    url = engine_url(database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_async_engine(url, connect_args={"timeout": 30})
        _tune_sqlite(engine)
    else:
        engine = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
    return SqlStore(engine)


def _tune_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN IMMEDIATE instead of pysqlite's deferred BEGIN,
        # so two writers never deadlock upgrading read locks.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


class SqlUnitOfWork:
    def __init__(self, conn: AsyncConnection, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self.tenants = _Tenants(conn, tenant_id)
        self.users = _Users(conn, tenant_id)
        self.credentials = _Credentials(conn, tenant_id)
        self.journal = _Journal(conn, tenant_id)


class _Repo:
    def __init__(self, conn: AsyncConnection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def _insert(self, table: Any, row: dict[str, Any], conflict: str) -> None:
        try:
            async with self.conn.begin_nested():
                await self.conn.execute(insert(table).values(row))
        except IntegrityError as e:
            raise Conflict(conflict) from e


class _Tenants(_Repo):
    async def add(self, tenant: Tenant) -> None:
        row = {"tenant_id": tenant.tenant_id, "name": tenant.name, "created_at": tenant.created_at}
        await self._insert(t.tenants, row, f"A tenant named {tenant.tenant_id!r} exists; pick another name.")
        await self.conn.execute(insert(t.audit_heads).values(tenant_id=tenant.tenant_id, seq=0, hash=GENESIS))

    async def get(self) -> Tenant | None:
        row = (
            await self.conn.execute(select(t.tenants).where(t.tenants.c.tenant_id == self.tenant_id))
        ).first()
        return None if row is None else Tenant(row.tenant_id, row.name, row.created_at)


class _Users(_Repo):
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
        row = (
            await self.conn.execute(
                select(t.users).where(c.tenant_id == self.tenant_id, c.user_id == user_id)
            )
        ).first()
        return None if row is None else User(row.tenant_id, row.user_id, row.display_name, row.created_at)


class _Credentials(_Repo):
    async def add(self, credential: Credential) -> None:
        row = {
            "tenant_id": credential.tenant_id,
            "credential_id": credential.credential_id,
            "kind": credential.kind.value,
            "secret_hash": credential.secret_hash,
            "scopes": " ".join(sorted(credential.scopes)),
            "user_id": credential.user_id,
            "agent_id": credential.agent_id,
            "device_id": credential.device_id,
            "require_device_signature": credential.require_device_signature,
            "created_at": credential.created_at,
            "revoked_at": credential.revoked_at,
        }
        await self._insert(t.credentials, row, "That credential exists already.")

    async def get(self, credential_id: str) -> Credential | None:
        c = t.credentials.c
        row = (
            await self.conn.execute(
                select(t.credentials).where(c.tenant_id == self.tenant_id, c.credential_id == credential_id)
            )
        ).first()
        if row is None:
            return None
        return Credential(
            tenant_id=row.tenant_id,
            credential_id=row.credential_id,
            kind=TokenKind(row.kind),
            secret_hash=row.secret_hash,
            scopes=frozenset(Scope(s) for s in row.scopes.split()),
            created_at=row.created_at,
            user_id=row.user_id,
            agent_id=row.agent_id,
            device_id=row.device_id,
            require_device_signature=row.require_device_signature,
            revoked_at=row.revoked_at,
        )


class _Journal(_Repo):
    async def append(self, record: AuditRecord, at: datetime) -> AuditEntry:
        h = t.audit_heads.c
        head = (
            await self.conn.execute(
                select(h.seq, h.hash).where(h.tenant_id == self.tenant_id).with_for_update()
            )
        ).first()
        if head is None:
            raise StorageError(f"Tenant {self.tenant_id!r} has no audit journal; was it created?")
        entry = chain_entry(self.tenant_id, head.seq + 1, at, record, head.hash)
        await self.conn.execute(
            insert(t.audit_entries).values(
                tenant_id=entry.tenant_id,
                seq=entry.seq,
                at=entry.at,
                action=entry.action,
                actor=entry.actor,
                outcome=entry.outcome,
                subject=entry.subject,
                reason=entry.reason,
                data=json.dumps(dict(entry.data), sort_keys=True),
                prev_hash=entry.prev_hash,
                hash=entry.hash,
            )
        )
        await self.conn.execute(
            update(t.audit_heads).where(h.tenant_id == self.tenant_id).values(seq=entry.seq, hash=entry.hash)
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
