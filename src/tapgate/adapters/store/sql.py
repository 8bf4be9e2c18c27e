"""The Store over SQLAlchemy's async engine: SQLite (aiosqlite, WAL) and PostgreSQL (asyncpg, RLS).

Every query names its tenant; on PostgreSQL each transaction also sets ``app.tenant_id`` so that
row-level security hides every other tenant's rows even from a query that forgot to.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import case, delete, func, insert, or_, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.counting import count
from tapgate.adapters.store.sql_console import SqlConsoleSessions, SqlSignIns
from tapgate.adapters.store.sqlite import SqliteDatabase
from tapgate.adapters.store.urls import engine_url
from tapgate.adapters.wake.local import LocalWake
from tapgate.adapters.wake.postgres import CHANNEL
from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.approvals import SignBlock
from tapgate.domain.audit import GENESIS, AuditEntry, AuditRecord, chain_entry
from tapgate.domain.devices import Capability, Declared, Device, DeviceStatus, PushTarget, parse_capability
from tapgate.domain.errors import Conflict, DuplicateInvocation, StorageError
from tapgate.domain.events import Event, EventValue
from tapgate.domain.inbox import Approval, ApprovalStatus, erased_preview
from tapgate.domain.ingest import Receipt, Triage
from tapgate.domain.invocations import OPEN, Invocation, Status
from tapgate.domain.keys import KeyAlgorithm
from tapgate.domain.notices import NOTICE_EVENTS
from tapgate.domain.pairing import Pairing, PairingStatus
from tapgate.domain.passkeys import Passkey
from tapgate.domain.principals import Scope, TokenKind
from tapgate.domain.push import KEPT, OutboxItem, OutboxStatus
from tapgate.domain.sessions import Session, SessionKind

log = logging.getLogger(__name__)


class Conn(Protocol):
    """What the repositories need of a connection (SQLAlchemy's AsyncConnection, or SQLite's inline one)."""

    dialect: Any

    async def execute(self, statement: Any, parameters: Any = None) -> Any: ...

    async def scalar(self, statement: Any, parameters: Any = None) -> Any: ...

    def begin_nested(self) -> Any: ...


class SqlStore:
    """One database, one unit of work per transaction. Build it with :func:`open_sql_store`.

    PostgreSQL runs through asyncpg's pool; SQLite through one connection on the event loop's thread
    (see ``sqlite.py``). Both run the same statements. ``database_notify`` (PostgreSQL): each transaction
    also sends its keys with ``pg_notify`` for the other processes; off when the wake has its own way
    across processes (NATS) or there are none.
    """

    def __init__(
        self,
        engine: AsyncEngine | None,
        wake: LocalWake | None = None,
        sqlite: SqliteDatabase | None = None,
        database_notify: bool = True,
    ) -> None:
        self.engine = engine
        self.sqlite = sqlite
        self.wake = wake or LocalWake()
        self.is_postgres = sqlite is None
        self.database_notify = database_notify

    @contextlib.asynccontextmanager
    async def unit_of_work(self, tenant_id: str) -> AsyncIterator[SqlUnitOfWork]:
        keys: list[str] = []
        async with self._transaction(tenant_id) as uow:
            keys = uow.keys
            yield uow
        for key in keys:  # committed: wake this process's waiters at once
            self.wake.notify(key)

    @contextlib.asynccontextmanager
    async def _transaction(self, tenant_id: str) -> AsyncIterator[SqlUnitOfWork]:
        try:
            if self.sqlite is not None:
                async with self.sqlite.transaction() as inline:
                    yield SqlUnitOfWork(inline, tenant_id)
                return
            assert self.engine is not None
            async with self.engine.begin() as conn:
                await conn.execute(
                    text("SELECT set_config('app.tenant_id', :tenant, true)"), {"tenant": tenant_id}
                )
                uow = SqlUnitOfWork(conn, tenant_id)
                yield uow
                if uow.keys and self.database_notify:
                    # Delivered to every listening process exactly when this transaction commits.
                    await conn.execute(
                        text("SELECT pg_notify(:channel, k) FROM unnest(CAST(:keys AS text[])) AS k"),
                        {"channel": CHANNEL, "keys": list(uow.keys)},
                    )
        except DBAPIError as e:
            # The driver's message can quote row contents: log its class only.
            log.error("storage error", extra={"error": type(e.orig).__name__})
            raise StorageError("The database failed; try again, and check the server's health.") from e

    async def tenant_ids(self) -> Sequence[str]:
        if self.sqlite is not None:
            async with self.sqlite.reading() as inline:
                rows = await inline.execute(select(t.tenants.c.tenant_id).order_by(t.tenants.c.tenant_id))
                return [r[0] for r in rows]
        assert self.engine is not None
        async with self.engine.connect() as conn:
            return [r[0] for r in await conn.execute(text("SELECT tapgate_tenant_ids()"))]

    async def ping(self) -> None:
        try:
            if self.sqlite is not None:
                async with self.sqlite.reading() as inline:
                    await inline.execute(text("SELECT 1"))
                return
            assert self.engine is not None
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except (DBAPIError, OSError) as e:
            raise StorageError("The database cannot be reached.") from e

    async def close(self) -> None:
        if self.sqlite is not None:
            self.sqlite.close()
        if self.engine is not None:
            await self.engine.dispose()


def _quiet_drivers() -> None:
    # aiosqlite logs every statement with its parameters at DEBUG, and the parameters hold message
    # text: those records must never be emitted, whatever level the operator picks.
    for name in ("aiosqlite", "sqlalchemy.engine", "sqlalchemy.pool"):
        logging.getLogger(name).setLevel(logging.WARNING)


def open_sql_store(
    database_url: str, pool_size: int = 10, wake: LocalWake | None = None, database_notify: bool = True
) -> SqlStore:
    """A store for ``database_url`` with tapgate's connection settings."""
    _quiet_drivers()
    url = engine_url(database_url)
    if url.get_backend_name() == "sqlite":
        return SqlStore(None, wake, SqliteDatabase(url))
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
    count(engine.sync_engine)
    return SqlStore(engine, wake, database_notify=database_notify)


class SqlUnitOfWork:
    def __init__(self, conn: Conn, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self.tenants = _Tenants(conn, tenant_id)
        self.users = _Users(conn, tenant_id)
        self.credentials = _Credentials(conn, tenant_id)
        self.journal = _Journal(conn, tenant_id)
        self.devices = _Devices(conn, tenant_id)
        self.pairings = _Pairings(conn, tenant_id)
        self.sessions = _Sessions(conn, tenant_id)
        self.invocations = _Invocations(conn, tenant_id)
        self.events = _Events(conn, tenant_id)
        self.outbox = _Outbox(conn, tenant_id)
        self.approvals = _Approvals(conn, tenant_id)
        self.pauses = _Pauses(conn, tenant_id)
        self.ingests = _Ingests(conn, tenant_id)
        self.sign_ins = SqlSignIns(conn, tenant_id)
        self.console_sessions = SqlConsoleSessions(conn, tenant_id)
        self.passkeys = _Passkeys(conn, tenant_id)
        self.keys: list[str] = []

    def notify(self, key: str) -> None:
        if key not in self.keys:
            self.keys.append(key)


class _Repo:
    def __init__(self, conn: Conn, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def _insert(self, table: Any, row: dict[str, Any], conflict: str) -> None:
        # No savepoint: a conflict ends the whole unit of work, so nothing after it needs the transaction.
        try:
            await self.conn.execute(_insert_into(table), row)
        except IntegrityError as e:
            if _is_unique_violation(e):
                raise Conflict(conflict) from e
            raise StorageError("A row refers to something that does not exist in this tenant.") from e


@functools.cache
def _insert_into(table: Any) -> Any:
    """One INSERT statement per table, built once: the values come as parameters."""
    return insert(table)


class _Tenants(_Repo):
    async def add(self, tenant: Tenant) -> None:
        row = {"tenant_id": tenant.tenant_id, "name": tenant.name, "created_at": tenant.created_at}
        await self._insert(t.tenants, row, f"A tenant named {tenant.tenant_id!r} exists; pick another name.")
        await self.conn.execute(
            _insert_into(t.audit_heads), {"tenant_id": tenant.tenant_id, "seq": 0, "hash": GENESIS}
        )

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

    async def list(self) -> Sequence[User]:
        c = t.users.c
        rows = await self.conn.execute(
            select(t.users).where(c.tenant_id == self.tenant_id).order_by(c.user_id)
        )
        return [User(row.tenant_id, row.user_id, row.display_name, row.created_at) for row in rows]


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
            "device_uid": credential.device_uid,
            "require_device_signature": credential.require_device_signature,
            "created_at": credential.created_at,
            "revoked_at": credential.revoked_at,
            "expires_at": credential.expires_at,
            "last_used_at": credential.last_used_at,
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
            update(t.credentials)
            .where(c.tenant_id == self.tenant_id, c.device_uid == device_uid, c.revoked_at.is_(None))
            .values(revoked_at=at)
        )

    async def list(self, user_id: str | None = None, kind: TokenKind | None = None) -> Sequence[Credential]:
        c = t.credentials.c
        query = select(t.credentials).where(c.tenant_id == self.tenant_id, c.revoked_at.is_(None))
        if user_id is not None:
            query = query.where(c.user_id == user_id)
        if kind is not None:
            query = query.where(c.kind == kind.value)
        rows = await self.conn.execute(query.order_by(c.created_at, c.credential_id))
        return [_credential(row) for row in rows]

    async def revoke(self, credential_id: str, at: datetime) -> bool:
        c = t.credentials.c
        done = await self.conn.execute(
            update(t.credentials)
            .where(c.tenant_id == self.tenant_id, c.credential_id == credential_id, c.revoked_at.is_(None))
            .values(revoked_at=at)
        )
        return bool(done.rowcount)

    async def touch(self, used: Mapping[str, datetime]) -> None:
        c = t.credentials.c
        for credential_id, at in used.items():
            await self.conn.execute(
                update(t.credentials)
                .where(
                    c.tenant_id == self.tenant_id,
                    c.credential_id == credential_id,
                    or_(c.last_used_at.is_(None), c.last_used_at < at),
                )
                .values(last_used_at=at)
            )


def _is_unique_violation(error: IntegrityError) -> bool:
    sqlstate = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    return sqlstate == "23505" or "UNIQUE constraint failed" in str(error.orig)


@functools.lru_cache(maxsize=4096)
def _stored_capability(definition: str) -> Capability:
    """A stored capability, parsed once per distinct definition (they were checked on the way in)."""
    return parse_capability(json.loads(definition), "stored").capability


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
    )


class _Devices(_Repo):
    async def add(self, device: Device) -> None:
        row = {
            "tenant_id": device.tenant_id,
            "device_uid": device.device_uid,
            "user_id": device.user_id,
            "device_id": device.device_id,
            "name": device.name,
            "kind": device.kind,
            "alg": device.alg,
            "public_key": device.public_key,
            "status": device.status.value,
            "push_kind": device.push.kind if device.push else None,
            "push_token": device.push.token if device.push else None,
            "created_at": device.created_at,
            "last_seen_at": device.last_seen_at,
            "revoked_at": device.revoked_at,
        }
        await self._insert(
            t.devices,
            row,
            f"User {device.user_id!r} has a device {device.device_id!r} already; pick another id.",
        )
        await self.set_capabilities(device.device_uid, device.capabilities)

    async def _load(self, statement: Any, **values: Any) -> list[Device]:
        rows = (await self.conn.execute(statement, {"tenant": self.tenant_id, **values})).all()
        if not rows:
            return []
        declared: dict[str, list[Declared]] = {r.device_uid: [] for r in rows}
        caps = await self.conn.execute(q.CAPABILITIES, {"tenant": self.tenant_id, "uids": list(declared)})
        for cap in caps:
            declared[cap.device_uid].append(Declared(_stored_capability(cap.definition), cap.granted))
        return [
            Device(
                tenant_id=r.tenant_id,
                user_id=r.user_id,
                device_uid=r.device_uid,
                device_id=r.device_id,
                name=r.name,
                kind=r.kind,
                alg=r.alg,
                public_key=r.public_key,
                status=DeviceStatus(r.status),
                created_at=r.created_at,
                push=PushTarget(r.push_kind, r.push_token) if r.push_kind else None,
                last_seen_at=r.last_seen_at,
                revoked_at=r.revoked_at,
                capabilities=tuple(declared[r.device_uid]),
                link_until=r.link_until,
            )
            for r in rows
        ]

    async def get(self, user_id: str, device_id: str) -> Device | None:
        found = await self._load(q.LIVE_DEVICE, user=user_id, device=device_id)
        return found[0] if found else None

    async def by_uid(self, device_uid: str) -> Device | None:
        found = await self._load(q.DEVICE_BY_UID, uid=device_uid)
        return found[0] if found else None

    async def list(self, user_id: str) -> Sequence[Device]:
        return await self._load(q.LIVE_DEVICES, user=user_id)

    async def ever(self, user_id: str, device_id: str) -> bool:
        c = t.devices.c
        found = await self.conn.scalar(
            select(c.device_uid)
            .where(c.tenant_id == self.tenant_id, c.user_id == user_id, c.device_id == device_id)
            .limit(1)
        )
        return found is not None

    async def count_live(self, user_id: str) -> int:
        c = t.devices.c
        count = await self.conn.scalar(
            select(func.count()).where(
                c.tenant_id == self.tenant_id, c.user_id == user_id, c.status != DeviceStatus.REVOKED.value
            )
        )
        return int(count or 0)

    async def set_capabilities(self, device_uid: str, capabilities: Sequence[Declared]) -> None:
        k = t.capabilities.c
        await self.conn.execute(
            delete(t.capabilities).where(k.tenant_id == self.tenant_id, k.device_uid == device_uid)
        )
        if capabilities:
            await self.conn.execute(
                insert(t.capabilities),
                [
                    {
                        "tenant_id": self.tenant_id,
                        "device_uid": device_uid,
                        "name": d.capability.name,
                        "position": i,
                        "definition": json.dumps(d.capability.as_dict()),  # keeps the params in order
                        "granted": d.granted,
                    }
                    for i, d in enumerate(capabilities)
                ],
            )

    async def set_status(self, device_uid: str, status: DeviceStatus, at: datetime) -> None:
        c = t.devices.c
        values: dict[str, Any] = {"status": status.value}
        if status is DeviceStatus.REVOKED:
            values["revoked_at"] = at
        await self.conn.execute(
            update(t.devices).where(c.tenant_id == self.tenant_id, c.device_uid == device_uid).values(values)
        )

    async def set_link(self, device_uid: str, until: datetime | None) -> None:
        await self.conn.execute(q.LINK_DEVICE, {"tenant": self.tenant_id, "uid": device_uid, "until": until})

    async def set_push(self, device_uid: str, target: PushTarget | None) -> None:
        c = t.devices.c
        await self.conn.execute(
            update(t.devices)
            .where(c.tenant_id == self.tenant_id, c.device_uid == device_uid)
            .values(push_kind=target.kind if target else None, push_token=target.token if target else None)
        )

    async def touch(self, device_uid: str, at: datetime) -> None:
        await self.conn.execute(q.TOUCH_DEVICE, {"tenant": self.tenant_id, "uid": device_uid, "at": at})


class _Pairings(_Repo):
    @staticmethod
    def _row(p: Pairing) -> dict[str, Any]:
        return {
            "tenant_id": p.tenant_id,
            "pairing_id": p.pairing_id,
            "user_id": p.user_id,
            "code_hash": p.code_hash,
            "code": p.code,
            "status": p.status.value,
            "created_at": p.created_at,
            "expires_at": p.expires_at,
            "device_uid": p.device_uid,
            "comparison_code": p.comparison_code,
            "attempts": p.attempts,
            "decided_at": p.decided_at,
        }

    async def add(self, pairing: Pairing) -> None:
        await self._insert(t.pairings, self._row(pairing), "That pairing exists already.")

    async def get(self, pairing_id: str, for_update: bool = False) -> Pairing | None:
        c = t.pairings.c
        query = select(t.pairings).where(c.tenant_id == self.tenant_id, c.pairing_id == pairing_id)
        r = (await self.conn.execute(query.with_for_update() if for_update else query)).first()
        if r is None:
            return None
        return Pairing(
            tenant_id=r.tenant_id,
            pairing_id=r.pairing_id,
            user_id=r.user_id,
            code_hash=r.code_hash,
            status=PairingStatus(r.status),
            created_at=r.created_at,
            expires_at=r.expires_at,
            code=r.code,
            device_uid=r.device_uid,
            comparison_code=r.comparison_code,
            attempts=r.attempts,
            decided_at=r.decided_at,
        )

    async def save(self, pairing: Pairing) -> None:
        c = t.pairings.c
        await self.conn.execute(
            update(t.pairings)
            .where(c.tenant_id == self.tenant_id, c.pairing_id == pairing.pairing_id)
            .values(self._row(pairing))
        )


class _Sessions(_Repo):
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
            update(t.sessions)
            .where(
                c.tenant_id == self.tenant_id,
                c.user_id == session.user_id,
                c.session_id == session.session_id,
            )
            .values(values)
        )
        if changed.rowcount == 0:
            await self.conn.execute(
                _insert_into(t.sessions),
                dict(
                    tenant_id=session.tenant_id,
                    user_id=session.user_id,
                    session_id=session.session_id,
                    created_at=session.created_at,
                    **values,
                ),
            )

    async def add_message(
        self, session: Session, device_uid: str | None, capabilities: Sequence[str], at: datetime
    ) -> int:
        c = t.session_messages.c
        last = await self.conn.scalar(
            select(func.max(c.seq)).where(
                c.tenant_id == self.tenant_id,
                c.user_id == session.user_id,
                c.session_id == session.session_id,
            )
        )
        seq = int(last or 0) + 1
        await self.conn.execute(
            _insert_into(t.session_messages),
            {
                "tenant_id": self.tenant_id,
                "user_id": session.user_id,
                "session_id": session.session_id,
                "seq": seq,
                "device_uid": device_uid,
                "capabilities": json.dumps(list(capabilities)),
                "created_at": at,
            },
        )
        return seq


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
    )


class _Invocations(_Repo):
    async def erase_texts(self, before: datetime, capabilities: Sequence[str]) -> int:
        c = t.invocations.c
        old = (c.tenant_id == self.tenant_id, c.created_at < before, c.status.notin_(list(OPEN)))
        arguments = await self.conn.execute(
            update(t.invocations)
            .where(*old, c.capability.in_(list(capabilities)), c.arguments != "{}")
            .values(arguments="{}")
        )
        texts = await self.conn.execute(
            update(t.invocations)
            .where(*old, or_(c.message.is_not(None), c.late_message.is_not(None)))
            .values(message=None, late_message=None)
        )
        return int(arguments.rowcount or 0) + int(texts.rowcount or 0)

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
        }
        try:
            await self._insert(t.invocations, row, f"Invocation {i.invocation_id!r} exists already.")
        except Conflict as e:
            raise DuplicateInvocation(e.message) from e

    async def get(self, user_id: str, invocation_id: str) -> Invocation | None:
        values = {"tenant": self.tenant_id, "user": user_id, "id": invocation_id}
        r = (await self.conn.execute(q.INVOCATION, values)).first()
        return None if r is None else _invocation(r)

    async def pending_for(self, device_uid: str, limit: int) -> Sequence[Invocation]:
        rows = await self.conn.execute(
            q.PENDING_FOR, {"tenant": self.tenant_id, "uid": device_uid, "limit": limit}
        )
        return [_invocation(r) for r in rows]

    async def open_for(self, device_uid: str) -> Sequence[Invocation]:
        rows = await self.conn.execute(q.OPEN_FOR, {"tenant": self.tenant_id, "uid": device_uid})
        return [_invocation(r) for r in rows]

    async def mark_delivered(self, device_uid: str, invocation_ids: Sequence[str], at: datetime) -> None:
        if invocation_ids:
            values = {"tenant": self.tenant_id, "uid": device_uid, "ids": list(invocation_ids), "at": at}
            await self.conn.execute(q.MARK_DELIVERED, values)

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

    async def proceed(self, invocation: Invocation) -> bool:
        c = t.invocations.c
        changed = await self.conn.execute(
            update(t.invocations)
            .where(
                c.tenant_id == self.tenant_id,
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
            update(t.invocations)
            .where(
                c.tenant_id == self.tenant_id,
                c.user_id == user_id,
                c.invocation_id == invocation_id,
                c.late_status.is_(None),
            )
            .values(late_status=status, late_message=message, late_at=at)
        )
        return bool(changed.rowcount)

    async def due(self, now: datetime, limit: int) -> Sequence[Invocation]:
        c = t.invocations.c
        rows = await self.conn.execute(
            select(t.invocations)
            .where(c.tenant_id == self.tenant_id, c.status.in_(OPEN), c.expires_at <= now)
            .order_by(c.expires_at)
            .limit(limit)
        )
        return [_invocation(r) for r in rows]

    async def history(
        self, user_id: str, limit: int, agent_id: str | None = None, status: str | None = None
    ) -> Sequence[Invocation]:
        c = t.invocations.c
        query = select(t.invocations).where(c.tenant_id == self.tenant_id, c.user_id == user_id)
        if agent_id is not None:
            query = query.where(c.agent_id == agent_id)
        if status is not None:
            query = query.where(c.status == status)
        rows = await self.conn.execute(query.order_by(c.created_at.desc()).limit(limit))
        return [_invocation(r) for r in rows]


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


class _Outbox(_Repo):
    async def add(self, item: OutboxItem) -> None:
        await self.conn.execute(
            _insert_into(t.push_outbox),
            {"tenant_id": item.tenant_id, "delivery_id": item.delivery_id, **_outbox_row(item)},
        )

    async def get(self, delivery_id: str) -> OutboxItem | None:
        c = t.push_outbox.c
        r = (
            await self.conn.execute(
                select(t.push_outbox).where(c.tenant_id == self.tenant_id, c.delivery_id == delivery_id)
            )
        ).first()
        return None if r is None else _outbox_item(r)

    async def for_subject(self, subject_id: str) -> Sequence[OutboxItem]:
        c = t.push_outbox.c
        rows = await self.conn.execute(
            select(t.push_outbox)
            .where(c.tenant_id == self.tenant_id, c.subject_id == subject_id)
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
                select(t.push_outbox)
                .where(
                    c.tenant_id == self.tenant_id,
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
            update(t.push_outbox)
            .where(c.tenant_id == self.tenant_id, c.delivery_id.in_([r.delivery_id for r in rows]))
            .values(claimed_until=until)
        )
        return [replace(_outbox_item(r), claimed_until=until) for r in rows]

    async def save(self, item: OutboxItem) -> None:
        c = t.push_outbox.c
        await self.conn.execute(
            update(t.push_outbox)
            .where(c.tenant_id == self.tenant_id, c.delivery_id == item.delivery_id)
            .values(_outbox_row(item))
        )

    async def pushed_since(self, user_id: str, since: datetime) -> int:
        c = t.push_outbox.c
        count = await self.conn.scalar(
            select(func.count()).where(
                c.tenant_id == self.tenant_id,
                c.user_id == user_id,
                c.pushed_at >= since,
                c.status.in_(_PUSHED),
            )
        )
        return int(count or 0)

    async def last_pushed(self, device_uid: str) -> datetime | None:
        c = t.push_outbox.c
        last = await self.conn.scalar(
            select(func.max(c.pushed_at)).where(
                c.tenant_id == self.tenant_id, c.device_uid == device_uid, c.status.in_(_PUSHED)
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
            select(func.min(claimable)).where(
                c.tenant_id == self.tenant_id, c.status == OutboxStatus.QUEUED.value
            )
        )
        return due if isinstance(due, datetime) else None

    async def notices_for(self, device_uid: str, since: datetime) -> Sequence[OutboxItem]:
        c = t.push_outbox.c
        rows = await self.conn.execute(
            select(t.push_outbox)
            .where(
                c.tenant_id == self.tenant_id,
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
            update(t.push_outbox)
            .where(
                c.tenant_id == self.tenant_id,
                c.delivery_id.in_(list(delivery_ids)),
                c.status.in_([s.value for s in KEPT]),
            )
            .values(status=OutboxStatus.LINKED.value, finished_at=at, claimed_until=None, payload=None)
        )
        return int(result.rowcount or 0)

    async def expire_held(self, before: datetime) -> int:
        c = t.push_outbox.c
        result = await self.conn.execute(
            update(t.push_outbox)
            .where(
                c.tenant_id == self.tenant_id,
                c.status == OutboxStatus.HELD.value,
                c.created_at < before,
            )
            .values(status=OutboxStatus.SKIPPED.value, finished_at=before, payload=None)
        )
        return int(result.rowcount or 0)


def _advisory_key(purpose: str, tenant_id: str) -> int:
    """A stable signed 64-bit key for pg_advisory_xact_lock."""
    digest = hashlib.sha256(f"tapgate:{purpose}:{tenant_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


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


class _Approvals(_Repo):
    async def add(self, approval: Approval) -> None:
        a = approval
        await self.conn.execute(
            _insert_into(t.approvals),
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
                "arguments": None if a.arguments is None else json.dumps(dict(a.arguments), sort_keys=True),
            },
        )

    async def get(self, approval_id: str) -> Approval | None:
        c = t.approvals.c
        r = (
            await self.conn.execute(
                select(t.approvals).where(c.tenant_id == self.tenant_id, c.approval_id == approval_id)
            )
        ).first()
        return None if r is None else _approval(r)

    async def pending_for(self, user_id: str) -> Sequence[Approval]:
        c = t.approvals.c
        rows = await self.conn.execute(
            select(t.approvals)
            .where(
                c.tenant_id == self.tenant_id, c.user_id == user_id, c.status == ApprovalStatus.PENDING.value
            )
            .order_by(c.created_at, c.approval_id)
        )
        return [_approval(r) for r in rows]

    async def count_pending(self, user_id: str) -> int:
        c = t.approvals.c
        count = await self.conn.scalar(
            select(func.count()).where(
                c.tenant_id == self.tenant_id,
                c.user_id == user_id,
                c.status == ApprovalStatus.PENDING.value,
                c.invocation_id.is_not(None),
            )
        )
        return int(count or 0)

    async def erase_texts(self, before: datetime, kinds: Sequence[str]) -> int:
        c = t.approvals.c
        changed = 0
        for kind in kinds:
            result = await self.conn.execute(
                update(t.approvals)
                .where(
                    c.tenant_id == self.tenant_id,
                    c.created_at < before,
                    c.kind == kind,
                    c.arguments.is_not(None),
                )
                .values(arguments=None, preview=json.dumps(erased_preview(kind), sort_keys=True))
            )
            changed += int(result.rowcount or 0)
        return changed

    async def decide(self, approval: Approval) -> bool:
        c = t.approvals.c
        changed = await self.conn.execute(
            update(t.approvals)
            .where(
                c.tenant_id == self.tenant_id,
                c.approval_id == approval.approval_id,
                c.status == ApprovalStatus.PENDING.value,
            )
            .values(
                status=approval.status.value, decided_at=approval.decided_at, decided_by=approval.decided_by
            )
        )
        return bool(changed.rowcount)


class _Pauses(_Repo):
    async def pause(self, user_id: str, agent_id: str, until: datetime) -> None:
        c = t.agent_pauses.c
        changed = await self.conn.execute(
            update(t.agent_pauses)
            .where(c.tenant_id == self.tenant_id, c.user_id == user_id, c.agent_id == agent_id)
            .values(until=until)
        )
        if not changed.rowcount:
            await self.conn.execute(
                _insert_into(t.agent_pauses),
                {"tenant_id": self.tenant_id, "user_id": user_id, "agent_id": agent_id, "until": until},
            )

    async def paused_until(self, user_id: str, agent_id: str) -> datetime | None:
        c = t.agent_pauses.c
        until = await self.conn.scalar(
            select(c.until).where(c.tenant_id == self.tenant_id, c.user_id == user_id, c.agent_id == agent_id)
        )
        return until if isinstance(until, datetime) else None


class _Passkeys(_Repo):
    async def add(self, passkey: Passkey) -> None:
        found = await self.get(passkey.credential_id)
        if found is not None:
            if found.device_uid != passkey.device_uid:
                raise Conflict("This passkey is registered for another device.")
            return
        row = {
            "tenant_id": self.tenant_id,
            "credential_id": passkey.credential_id,
            "device_uid": passkey.device_uid,
            "user_id": passkey.user_id,
            "public_key": passkey.public_key,
            "sign_count": passkey.sign_count,
            "created_at": passkey.created_at,
        }
        await self._insert(t.passkeys, row, "This passkey is registered already.")

    async def get(self, credential_id: str) -> Passkey | None:
        c = t.passkeys.c
        row = (
            await self.conn.execute(
                select(t.passkeys).where(c.tenant_id == self.tenant_id, c.credential_id == credential_id)
            )
        ).first()
        return _passkey(row) if row is not None else None

    async def for_device(self, device_uid: str) -> Sequence[Passkey]:
        c = t.passkeys.c
        rows = await self.conn.execute(
            select(t.passkeys)
            .where(c.tenant_id == self.tenant_id, c.device_uid == device_uid)
            .order_by(c.created_at)
        )
        return [_passkey(row) for row in rows]

    async def set_sign_count(self, credential_id: str, sign_count: int) -> None:
        c = t.passkeys.c
        await self.conn.execute(
            update(t.passkeys)
            .where(c.tenant_id == self.tenant_id, c.credential_id == credential_id)
            .values(sign_count=sign_count)
        )

    async def required(self, user_id: str) -> bool | None:
        c = t.passkey_users.c
        found = await self.conn.scalar(
            select(c.required).where(c.tenant_id == self.tenant_id, c.user_id == user_id)
        )
        return None if found is None else bool(found)

    async def set_required(self, user_id: str, required: bool | None) -> None:
        c = t.passkey_users.c
        await self.conn.execute(
            delete(t.passkey_users).where(c.tenant_id == self.tenant_id, c.user_id == user_id)
        )
        if required is not None:
            await self.conn.execute(
                _insert_into(t.passkey_users),
                {"tenant_id": self.tenant_id, "user_id": user_id, "required": required},
            )


def _passkey(row: Any) -> Passkey:
    return Passkey(
        tenant_id=row.tenant_id,
        credential_id=row.credential_id,
        device_uid=row.device_uid,
        user_id=row.user_id,
        public_key=row.public_key,
        sign_count=int(row.sign_count),
        created_at=row.created_at,
    )


class _Ingests(_Repo):
    async def receipt(self, device_uid: str, channel: str, digest: str) -> Receipt | None:
        c = t.ingest_receipts.c
        r = (
            await self.conn.execute(
                select(c.receipt_id, c.session_id, c.event_seq).where(
                    c.tenant_id == self.tenant_id,
                    c.device_uid == device_uid,
                    c.channel == channel,
                    c.digest == digest,
                )
            )
        ).first()
        return None if r is None else Receipt(r.receipt_id, r.session_id, r.event_seq)

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
            "event_seq": receipt.event_seq,
        }
        await self._insert(t.ingest_receipts, row, "This message was received already.")

    async def take(self, device_uid: str, day: str, cap: int) -> bool:
        c = t.ingest_counters.c
        where = (c.tenant_id == self.tenant_id, c.device_uid == device_uid, c.day == day)
        for _ in range(3):
            # The row lock makes the check and the count one step: the cap is exact under concurrency.
            counted = await self.conn.execute(
                update(t.ingest_counters).where(*where, c.count < cap).values(count=c.count + 1)
            )
            if counted.rowcount:
                return True
            current = await self.conn.scalar(select(c.count).where(*where))
            if current is not None:
                if current >= cap:
                    return False
                continue  # the day's row appeared between the two statements: count on it
            if cap <= 0:
                return False
            try:
                async with self.conn.begin_nested():
                    await self.conn.execute(
                        _insert_into(t.ingest_counters),
                        {"tenant_id": self.tenant_id, "device_uid": device_uid, "day": day, "count": 1},
                    )
            except IntegrityError:
                continue  # another message made the day's row first
            return True
        return False

    async def triage(self, device_uid: str, channel: str) -> Triage | None:
        c = t.triage_sessions.c
        r = (
            await self.conn.execute(
                select(c.session_id, c.last_message_at).where(
                    c.tenant_id == self.tenant_id, c.device_uid == device_uid, c.channel == channel
                )
            )
        ).first()
        return None if r is None else Triage(r.session_id, r.last_message_at)

    async def set_triage(
        self, device_uid: str, channel: str, user_id: str, triage: Triage, replace: bool
    ) -> None:
        c = t.triage_sessions.c
        if replace:
            await self.conn.execute(
                update(t.triage_sessions)
                .where(c.tenant_id == self.tenant_id, c.device_uid == device_uid, c.channel == channel)
                .values(session_id=triage.session_id, last_message_at=triage.last_message_at)
            )
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


class _Events(_Repo):
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
            _insert_into(t.events),
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


class _Journal(_Repo):
    async def head(self) -> tuple[int, str] | None:
        row = (await self.conn.execute(q.AUDIT_HEAD, {"tenant": self.tenant_id})).first()
        return None if row is None else (int(row.seq), str(row.hash))

    async def append(self, record: AuditRecord, at: datetime) -> AuditEntry:
        head = (await self.conn.execute(q.AUDIT_HEAD_LOCKED, {"tenant": self.tenant_id})).first()
        if head is None:
            raise StorageError(f"Tenant {self.tenant_id!r} has no audit journal; was it created?")
        entry = chain_entry(self.tenant_id, head.seq + 1, at, record, head.hash)
        await self.conn.execute(
            _insert_into(t.audit_entries),
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
