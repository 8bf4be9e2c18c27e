"""An in-memory Store: a real adapter that passes the store contract suite, for simulations and tests.

A unit of work works on a copy of the state and swaps it in on success, so a failed block leaves nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from tapgate.adapters.store.tenancy import of_tenant, owned
from tapgate.adapters.wake.local import LocalWake
from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.audit import GENESIS, AuditEntry, AuditRecord, chain_entry
from tapgate.domain.capabilities import CONFIRMED_ON_SCREEN
from tapgate.domain.console import ALL_AGENTS, ConsoleSession, SignIn, SignInStatus
from tapgate.domain.devices import Declared, Device, DeviceStatus, Presence, PushTarget
from tapgate.domain.errors import Conflict, DuplicateInvocation, StorageError
from tapgate.domain.events import Event, EventValue
from tapgate.domain.inbox import Approval, ApprovalStatus, erased_preview
from tapgate.domain.ingest import Receipt, Triage
from tapgate.domain.invocations import Invocation, Status
from tapgate.domain.mandates import Mandate, MandateStatus, utc_day
from tapgate.domain.notices import NOTICE_EVENTS
from tapgate.domain.pairing import Pairing
from tapgate.domain.passkeys import Passkey
from tapgate.domain.principals import TokenKind
from tapgate.domain.proofs import IssuerKey, SignedDecision
from tapgate.domain.push import KEPT, OutboxItem, OutboxStatus
from tapgate.domain.sessions import Session


@dataclass
class _State:
    tenants: dict[str, Tenant] = field(default_factory=dict)
    users: dict[tuple[str, str], User] = field(default_factory=dict)
    credentials: dict[tuple[str, str], Credential] = field(default_factory=dict)
    audit: dict[str, list[AuditEntry]] = field(default_factory=dict)
    devices: dict[tuple[str, str], Device] = field(default_factory=dict)
    pairings: dict[tuple[str, str], Pairing] = field(default_factory=dict)
    sessions: dict[tuple[str, str, str], Session] = field(default_factory=dict)
    session_messages: dict[tuple[str, str, str], int] = field(default_factory=dict)
    invocations: dict[tuple[str, str, str], Invocation] = field(default_factory=dict)  # (tenant, user, id)
    events: dict[str, list[Event]] = field(default_factory=dict)
    outbox: dict[tuple[str, str], OutboxItem] = field(default_factory=dict)
    approvals: dict[tuple[str, str], Approval] = field(default_factory=dict)
    pauses: dict[tuple[str, str, str], datetime] = field(default_factory=dict)
    receipts: dict[tuple[str, str, str, str], Receipt] = field(default_factory=dict)
    counters: dict[tuple[str, str, str], int] = field(default_factory=dict)
    triage: dict[tuple[str, str, str], Triage] = field(default_factory=dict)
    sign_ins: dict[tuple[str, str], SignIn] = field(default_factory=dict)
    console_sessions: dict[tuple[str, str], ConsoleSession] = field(default_factory=dict)
    passkeys: dict[tuple[str, str], Passkey] = field(default_factory=dict)
    passkey_users: dict[tuple[str, str], bool] = field(default_factory=dict)
    mandates: dict[tuple[str, str], Mandate] = field(default_factory=dict)
    issuer_keys: dict[tuple[str, str], IssuerKey] = field(default_factory=dict)
    signatures: dict[tuple[str, str], SignedDecision] = field(default_factory=dict)

    def copy(self) -> _State:
        return _State(
            dict(self.tenants),
            dict(self.users),
            dict(self.credentials),
            {k: list(v) for k, v in self.audit.items()},
            dict(self.devices),
            dict(self.pairings),
            dict(self.sessions),
            dict(self.session_messages),
            dict(self.invocations),
            {k: list(v) for k, v in self.events.items()},
            dict(self.outbox),
            dict(self.approvals),
            dict(self.pauses),
            dict(self.receipts),
            dict(self.counters),
            dict(self.triage),
            dict(self.sign_ins),
            dict(self.console_sessions),
            dict(self.passkeys),
            dict(self.passkey_users),
            dict(self.mandates),
            dict(self.issuer_keys),
            dict(self.signatures),
        )


class MemoryStore:
    def __init__(self, wake: LocalWake | None = None) -> None:
        self._state = _State()
        self._lock = asyncio.Lock()
        self.wake = wake or LocalWake()

    @contextlib.asynccontextmanager
    async def unit_of_work(self, tenant_id: str) -> AsyncIterator[MemoryUnitOfWork]:
        async with self._lock:
            work = self._state.copy()
            uow = MemoryUnitOfWork(work, tenant_id)
            yield uow
            self._state = work
        self.wake.committed(uow.keys, uow.handed)  # wake this process's waiters at once

    def reading(self, tenant_id: str) -> contextlib.AbstractAsyncContextManager[MemoryUnitOfWork]:
        return self.unit_of_work(tenant_id)

    async def tenant_ids(self) -> Sequence[str]:
        return sorted(self._state.tenants)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


class MemoryUnitOfWork:
    def __init__(self, state: _State, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self.tenants = _Tenants(state, tenant_id)
        self.users = _Users(state, tenant_id)
        self.credentials = _Credentials(state, tenant_id)
        self.journal = _Journal(state, tenant_id)
        self.devices = _Devices(state, tenant_id)
        self.pairings = _Pairings(state, tenant_id)
        self.sessions = _Sessions(state, tenant_id)
        self.invocations = _Invocations(state, tenant_id)
        self.events = _Events(state, tenant_id)
        self.outbox = _Outbox(state, tenant_id)
        self.approvals = _Approvals(state, tenant_id)
        self.pauses = _Pauses(state, tenant_id)
        self.ingests = _Ingests(state, tenant_id)
        self.sign_ins = _SignIns(state, tenant_id)
        self.console_sessions = _ConsoleSessions(state, tenant_id)
        self.passkeys = _Passkeys(state, tenant_id)
        self.mandates = _Mandates(state, tenant_id)
        self.proofs = _Proofs(state, tenant_id)
        self.keys: list[str] = []
        self.handed: dict[str, list[object]] = {}  # what hand(key, value) hands with each key

    def notify(self, key: str) -> None:
        if key not in self.keys:
            self.keys.append(key)

    def hand(self, key: str, value: object) -> None:
        self.notify(key)
        self.handed.setdefault(key, []).append(value)


class _Repo:
    def __init__(self, state: _State, tenant_id: str) -> None:
        self.state = state
        self.tenant_id = tenant_id

    def _own(self, tenant_id: str) -> None:
        # What row-level security's WITH CHECK does on PostgreSQL.
        owned({"tenant_id": tenant_id}, self.tenant_id)


class _Tenants(_Repo):
    async def add(self, tenant: Tenant) -> None:
        self._own(tenant.tenant_id)
        if tenant.tenant_id in self.state.tenants:
            raise Conflict(f"A tenant named {tenant.tenant_id!r} exists; pick another name.")
        self.state.tenants[tenant.tenant_id] = tenant
        self.state.audit[tenant.tenant_id] = []

    async def get(self) -> Tenant | None:
        return self.state.tenants.get(self.tenant_id)

    async def set_served(self, url: str, moved_at: datetime | None) -> None:
        tenant = self.state.tenants.get(self.tenant_id)
        if tenant is not None:
            moved = moved_at or tenant.moved_at
            self.state.tenants[self.tenant_id] = replace(tenant, served_url=url, moved_at=moved)


class _Users(_Repo):
    async def add(self, user: User) -> None:
        self._own(user.tenant_id)
        key = (user.tenant_id, user.user_id)
        if key in self.state.users:
            raise Conflict(f"User {user.user_id!r} exists already.")
        if user.tenant_id not in self.state.tenants:
            raise StorageError("The user's tenant does not exist.")
        self.state.users[key] = user

    async def get(self, user_id: str) -> User | None:
        return self.state.users.get((self.tenant_id, user_id))

    async def list(self) -> Sequence[User]:
        return sorted(
            of_tenant(self.state.users, self.tenant_id),
            key=lambda user: user.user_id,
        )


class _Credentials(_Repo):
    async def add(self, credential: Credential) -> None:
        self._own(credential.tenant_id)
        key = (credential.tenant_id, credential.credential_id)
        if key in self.state.credentials:
            raise Conflict("That credential exists already.")
        self.state.credentials[key] = replace(credential)

    async def get(self, credential_id: str) -> Credential | None:
        return self.state.credentials.get((self.tenant_id, credential_id))

    async def revoke_device(self, device_uid: str, at: datetime) -> None:
        for credential in of_tenant(self.state.credentials, self.tenant_id):
            if credential.device_uid == device_uid and not credential.revoked_at:
                key = (self.tenant_id, credential.credential_id)
                self.state.credentials[key] = replace(credential, revoked_at=at)

    async def list(self, user_id: str | None = None, kind: TokenKind | None = None) -> Sequence[Credential]:
        found = [
            c
            for c in of_tenant(self.state.credentials, self.tenant_id)
            if c.revoked_at is None
            and (user_id is None or c.user_id == user_id)
            and (kind is None or c.kind is kind)
        ]
        return sorted(found, key=lambda c: (c.created_at, c.credential_id))

    async def revoke(self, credential_id: str, at: datetime) -> bool:
        key = (self.tenant_id, credential_id)
        credential = self.state.credentials.get(key)
        if credential is None or credential.revoked_at is not None:
            return False
        self.state.credentials[key] = replace(credential, revoked_at=at)
        return True

    async def touch(self, used: Mapping[str, datetime]) -> None:
        for credential_id, at in used.items():
            key = (self.tenant_id, credential_id)
            credential = self.state.credentials.get(key)
            if credential is not None and (credential.last_used_at is None or credential.last_used_at < at):
                self.state.credentials[key] = replace(credential, last_used_at=at)


class _Devices(_Repo):
    def _mine(self) -> list[Device]:
        found = of_tenant(self.state.devices, self.tenant_id)
        return sorted(found, key=lambda d: (d.created_at, d.device_uid))

    async def add(self, device: Device) -> None:
        self._own(device.tenant_id)
        if await self.get(device.user_id, device.device_id) is not None:
            raise Conflict(
                f"User {device.user_id!r} has a device {device.device_id!r} already; pick another id."
            )
        if (device.tenant_id, device.user_id) not in self.state.users:
            raise StorageError("A row refers to something that does not exist in this tenant.")
        self.state.devices[(device.tenant_id, device.device_uid)] = device

    async def get(self, user_id: str, device_id: str) -> Device | None:
        return next(
            (
                d
                for d in self._mine()
                if d.user_id == user_id and d.device_id == device_id and d.status is not DeviceStatus.REVOKED
            ),
            None,
        )

    async def get_with_pause(
        self, user_id: str, device_id: str, agent_id: str = ALL_AGENTS
    ) -> tuple[Device | None, datetime | None, datetime | None]:
        paused_until = self.state.pauses.get((self.tenant_id, user_id, ALL_AGENTS))
        device = await self.get(user_id, device_id)
        agent = self.state.pauses.get((self.tenant_id, user_id, agent_id)) if device is not None else None
        return device, paused_until, agent

    async def by_uid(self, device_uid: str) -> Device | None:
        return self.state.devices.get((self.tenant_id, device_uid))

    async def presence(self, device_uid: str) -> Presence | None:
        device = await self.by_uid(device_uid)
        return None if device is None else device.presence()

    async def ever(self, user_id: str, device_id: str) -> bool:
        return any(d.user_id == user_id and d.device_id == device_id for d in self._mine())

    async def list(self, user_id: str) -> Sequence[Device]:
        return [d for d in self._mine() if d.user_id == user_id and d.status is not DeviceStatus.REVOKED]

    async def count_live(self, user_id: str) -> int:
        return len(await self.list(user_id))

    def _update(self, device_uid: str, **changes: object) -> None:
        key = (self.tenant_id, device_uid)
        if key in self.state.devices:
            self.state.devices[key] = replace(self.state.devices[key], **changes)  # type: ignore[arg-type]

    async def set_capabilities(self, device_uid: str, capabilities: Sequence[Declared]) -> None:
        self._update(device_uid, capabilities=tuple(capabilities))

    async def set_status(self, device_uid: str, status: DeviceStatus, at: datetime) -> None:
        if status is DeviceStatus.REVOKED:
            self._update(device_uid, status=status, revoked_at=at)
        else:
            self._update(device_uid, status=status)

    async def touch(self, device_uid: str, at: datetime) -> None:
        self._update(device_uid, last_seen_at=at)

    async def set_link(self, device_uid: str, until: datetime | None) -> None:
        self._update(device_uid, link_until=until)

    async def hold_links(self, device_uids: Sequence[str], until: datetime) -> None:
        for device_uid in device_uids:
            self._update(device_uid, link_until=until)

    async def set_push(self, device_uid: str, target: PushTarget | None) -> None:
        self._update(device_uid, push=target)


class _Pairings(_Repo):
    async def add(self, pairing: Pairing) -> None:
        self._own(pairing.tenant_id)
        key = (pairing.tenant_id, pairing.pairing_id)
        if key in self.state.pairings:
            raise Conflict("That pairing exists already.")
        self.state.pairings[key] = pairing

    async def get(self, pairing_id: str, for_update: bool = False) -> Pairing | None:
        return self.state.pairings.get((self.tenant_id, pairing_id))

    async def save(self, pairing: Pairing) -> None:
        self._own(pairing.tenant_id)
        self.state.pairings[(pairing.tenant_id, pairing.pairing_id)] = pairing


class _Sessions(_Repo):
    async def get(self, user_id: str, session_id: str) -> Session | None:
        return self.state.sessions.get((self.tenant_id, user_id, session_id))

    async def save(self, session: Session) -> None:
        self._own(session.tenant_id)
        key = (session.tenant_id, session.user_id, session.session_id)
        existing = self.state.sessions.get(key)
        if existing is not None:
            session = replace(session, created_at=existing.created_at)
        self.state.sessions[key] = session

    async def add_message(
        self, session: Session, device_uid: str | None, capabilities: Sequence[str], at: datetime
    ) -> int:
        key = (self.tenant_id, session.user_id, session.session_id)
        self.state.session_messages[key] = self.state.session_messages.get(key, 0) + 1
        return self.state.session_messages[key]


class _Journal(_Repo):
    async def head(self) -> tuple[int, str] | None:
        chain = self.state.audit.get(self.tenant_id)
        if chain is None:
            return None
        return (len(chain), chain[-1].hash if chain else GENESIS)

    async def append(self, record: AuditRecord, at: datetime) -> None:
        chain = self.state.audit.get(self.tenant_id)
        if chain is None:
            raise StorageError(f"Tenant {self.tenant_id!r} has no audit journal; was it created?")
        prev = chain[-1].hash if chain else GENESIS
        entry = chain_entry(self.tenant_id, len(chain) + 1, at, record, prev)
        chain.append(entry)

    async def read(self, after: int, limit: int) -> Sequence[AuditEntry]:
        return self.state.audit.get(self.tenant_id, [])[after : after + limit]

    async def find(self, action: str, subject: str) -> Sequence[AuditEntry]:
        chain = self.state.audit.get(self.tenant_id, [])
        return [e for e in chain if e.action == action and e.subject == subject]


class _Invocations(_Repo):
    def _mine(self) -> list[Invocation]:
        found = of_tenant(self.state.invocations, self.tenant_id)
        return sorted(found, key=lambda i: (i.created_at, i.invocation_id))

    async def add(self, invocation: Invocation) -> None:
        self._own(invocation.tenant_id)
        key = (invocation.tenant_id, invocation.user_id, invocation.invocation_id)
        if key in self.state.invocations:
            raise DuplicateInvocation(f"Invocation {invocation.invocation_id!r} exists already.")
        self.state.invocations[key] = invocation

    async def get(self, user_id: str, invocation_id: str) -> Invocation | None:
        return self.state.invocations.get((self.tenant_id, user_id, invocation_id))

    async def get_with_presence(
        self, user_id: str, invocation_id: str
    ) -> tuple[Invocation | None, Presence | None]:
        invocation = await self.get(user_id, invocation_id)
        if invocation is None:
            return None, None
        device = self.state.devices.get((self.tenant_id, invocation.device_uid))
        return invocation, None if device is None else device.presence()

    async def history(
        self, user_id: str, limit: int, agent_id: str | None = None, status: str | None = None
    ) -> Sequence[Invocation]:
        found = [
            i
            for i in reversed(self._mine())
            if i.user_id == user_id
            and (agent_id is None or i.agent_id == agent_id)
            and (status is None or i.status.value == status)
        ]
        return found[:limit]

    async def pending_for(self, device_uid: str, limit: int) -> Sequence[Invocation]:
        mine = [i for i in self._mine() if i.device_uid == device_uid and i.status is Status.PENDING]
        return mine[:limit]

    async def open_for(self, device_uid: str) -> Sequence[Invocation]:
        return [i for i in self._mine() if i.device_uid == device_uid and i.status.open]

    async def mark_delivered(
        self, user_id: str, device_uid: str, invocation_ids: Sequence[str], at: datetime
    ) -> None:
        wanted = set(invocation_ids)
        for i in self._mine():
            if i.user_id == user_id and i.device_uid == device_uid and i.invocation_id in wanted:
                self.state.invocations[self._key(i)] = replace(i, delivered_at=at)

    def _key(self, invocation: Invocation) -> tuple[str, str, str]:
        return (self.tenant_id, invocation.user_id, invocation.invocation_id)

    async def resolve(self, invocation: Invocation) -> bool:
        key = self._key(invocation)
        found = self.state.invocations.get(key)
        if found is None or not found.status.open:
            return False
        self.state.invocations[key] = replace(
            found,
            status=invocation.status,
            resolved_at=invocation.resolved_at,
            message=invocation.message,
            reason=invocation.reason,
        )
        return True

    async def answer(
        self,
        user_id: str,
        invocation_id: str,
        device_uid: str,
        status: Status,
        message: str | None,
        at: datetime,
    ) -> Invocation | None:
        key = (self.tenant_id, user_id, invocation_id)
        found = self.state.invocations.get(key)
        if (
            found is None
            or found.device_uid != device_uid
            or found.status is not Status.PENDING
            or found.due(at)
        ):
            return None
        answered = replace(found, status=status, message=message, resolved_at=at)
        self.state.invocations[key] = answered
        return answered

    async def answer_with_presence(
        self,
        user_id: str,
        invocation_id: str,
        device_uid: str,
        status: Status,
        message: str | None,
        at: datetime,
    ) -> tuple[Invocation, Presence | None] | None:
        answered = await self.answer(user_id, invocation_id, device_uid, status, message, at)
        if answered is None:
            return None
        device = self.state.devices.get((self.tenant_id, device_uid))
        return answered, None if device is None else device.presence()

    async def proceed(self, invocation: Invocation) -> bool:
        key = self._key(invocation)
        found = self.state.invocations.get(key)
        if found is None or found.status is not Status.AWAITING_APPROVAL:
            return False
        self.state.invocations[key] = replace(
            found, status=invocation.status, expires_at=invocation.expires_at
        )
        return True

    async def count_confirming(self, user_id: str) -> int:
        return sum(
            1
            for i in self._mine()
            if i.user_id == user_id and i.status is Status.PENDING and i.capability in CONFIRMED_ON_SCREEN
        )

    async def add_late_report(
        self, user_id: str, invocation_id: str, status: str, message: str | None, at: datetime
    ) -> bool:
        key = (self.tenant_id, user_id, invocation_id)
        found = self.state.invocations.get(key)
        if found is None or found.late_status is not None:
            return False
        self.state.invocations[key] = replace(found, late_status=status, late_message=message, late_at=at)
        return True

    async def due(self, now: datetime, limit: int) -> Sequence[Invocation]:
        due = [i for i in self._mine() if i.status.open and i.expires_at <= now]
        return sorted(due, key=lambda i: i.expires_at)[:limit]

    async def erase_texts(self, before: datetime, capabilities: Sequence[str]) -> int:
        changed = 0
        for i in self._mine():
            if i.status.open or i.created_at >= before:
                continue
            erased = replace(
                i,
                arguments={} if i.capability in capabilities else i.arguments,
                message=None,
                late_message=None,
            )
            if erased != i:
                self.state.invocations[self._key(i)] = erased
                changed += 1
        return changed


class _Events(_Repo):
    async def append(self, user_id: str, type: str, data: Mapping[str, EventValue], at: datetime) -> None:
        events = self.state.events.setdefault(self.tenant_id, [])
        events.append(Event(self.tenant_id, len(events) + 1, user_id, type, dict(data), at))

    async def read(self, user_id: str, after: int, limit: int) -> Sequence[Event]:
        events = self.state.events.get(self.tenant_id, [])
        return [e for e in events[after:] if e.user_id == user_id][:limit]

    async def erase_bodies(
        self, type: str, fields: Sequence[str], before: datetime, after: int | None = None
    ) -> tuple[int, int]:
        events = self.state.events.get(self.tenant_id, [])
        start = after or 0
        young = next((e.seq for e in events[start:] if e.created_at >= before), None)
        through = max(start, len(events)) if young is None else young - 1
        changed = 0
        for n, e in enumerate(events[start : len(events) if after is None else through], start=start):
            if e.type == type and e.created_at < before and not e.data.get("erased"):
                data = {**e.data, **dict.fromkeys(fields, ""), "erased": True}
                events[n] = replace(e, data=data)
                changed += 1
        return changed, through


_PUSHED = (OutboxStatus.QUEUED, OutboxStatus.SENT)


class _Outbox(_Repo):
    def _mine(self) -> list[OutboxItem]:
        found = of_tenant(self.state.outbox, self.tenant_id)
        return sorted(found, key=lambda i: (i.created_at, i.delivery_id))

    async def add(self, item: OutboxItem) -> None:
        self._own(item.tenant_id)
        if (item.tenant_id, item.device_uid) not in self.state.devices:
            raise StorageError("A row refers to something that does not exist in this tenant.")
        self.state.outbox[(item.tenant_id, item.delivery_id)] = _kept(item)

    async def get(self, delivery_id: str) -> OutboxItem | None:
        return self.state.outbox.get((self.tenant_id, delivery_id))

    async def for_subject(self, subject_id: str) -> Sequence[OutboxItem]:
        return [i for i in self._mine() if i.subject_id == subject_id]

    async def claim(self, now: datetime, until: datetime, limit: int) -> Sequence[OutboxItem]:
        due = [
            i
            for i in self._mine()
            if i.status is OutboxStatus.QUEUED
            and i.not_before <= now
            and (i.claimed_until is None or i.claimed_until <= now)
        ]
        due.sort(key=lambda i: (i.not_before, i.created_at, i.delivery_id))
        claimed = [replace(i, claimed_until=until) for i in due[:limit]]
        for item in claimed:
            self.state.outbox[(self.tenant_id, item.delivery_id)] = item
        return claimed

    async def save(self, item: OutboxItem) -> None:
        key = (self.tenant_id, item.delivery_id)
        if key in self.state.outbox:
            self.state.outbox[key] = _kept(item)

    async def pushed_since(self, user_id: str, since: datetime) -> int:
        return sum(
            1
            for i in self._mine()
            if i.user_id == user_id and i.status in _PUSHED and i.pushed_at and i.pushed_at >= since
        )

    async def last_pushed(self, device_uid: str) -> datetime | None:
        times = [
            i.pushed_at
            for i in self._mine()
            if i.device_uid == device_uid and i.pushed_at is not None and i.status in _PUSHED
        ]
        return max(times, default=None)

    async def next_due(self) -> datetime | None:
        times = [
            max(i.not_before, i.claimed_until) if i.claimed_until else i.not_before
            for i in self._mine()
            if i.status is OutboxStatus.QUEUED
        ]
        return min(times, default=None)

    async def notices_for(self, device_uid: str, since: datetime) -> Sequence[OutboxItem]:
        return [
            i
            for i in self._mine()
            if i.device_uid == device_uid
            and i.event in NOTICE_EVENTS
            and i.created_at >= since
            and (i.status is OutboxStatus.HELD or (i.status is OutboxStatus.QUEUED and i.pushed_at is None))
        ]

    async def linked(self, delivery_ids: Sequence[str], at: datetime) -> int:
        done = 0
        for delivery_id in delivery_ids:
            item = self.state.outbox.get((self.tenant_id, delivery_id))
            if item is not None and item.status in KEPT:
                finished = replace(item, status=OutboxStatus.LINKED, finished_at=at, claimed_until=None)
                self.state.outbox[(self.tenant_id, delivery_id)] = _kept(finished)
                done += 1
        return done

    async def expire_held(self, before: datetime) -> int:
        old = [i for i in self._mine() if i.status is OutboxStatus.HELD and i.created_at < before]
        for item in old:
            finished = replace(item, status=OutboxStatus.SKIPPED, finished_at=before)
            self.state.outbox[(self.tenant_id, item.delivery_id)] = _kept(finished)
        return len(old)


def _kept(item: OutboxItem) -> OutboxItem:
    """What the store keeps: a finished row loses a notice's payload, as the SQL store's does."""
    if item.status in KEPT:
        return item
    return replace(item, data={}, title=None, body=None)


class _Approvals(_Repo):
    def _mine(self) -> list[Approval]:
        found = of_tenant(self.state.approvals, self.tenant_id)
        return sorted(found, key=lambda a: (a.created_at, a.approval_id))

    async def add(self, approval: Approval) -> None:
        self._own(approval.tenant_id)
        self.state.approvals[(approval.tenant_id, approval.approval_id)] = approval

    async def get(self, approval_id: str) -> Approval | None:
        return self.state.approvals.get((self.tenant_id, approval_id))

    async def pending_for(self, user_id: str) -> Sequence[Approval]:
        return [a for a in self._mine() if a.user_id == user_id and a.status is ApprovalStatus.PENDING]

    async def count_pending(self, user_id: str) -> int:
        return len([a for a in await self.pending_for(user_id) if a.invocation_id is not None])

    async def erase_texts(self, before: datetime, kinds: Sequence[str]) -> int:
        changed = 0
        for a in self._mine():
            if a.created_at < before and a.kind in kinds and a.arguments is not None:
                erased = replace(a, arguments=None, preview=erased_preview(a.kind))
                self.state.approvals[(self.tenant_id, a.approval_id)] = erased
                changed += 1
        return changed

    async def decide(self, approval: Approval) -> bool:
        key = (self.tenant_id, approval.approval_id)
        found = self.state.approvals.get(key)
        if found is None or found.status is not ApprovalStatus.PENDING:
            return False
        self.state.approvals[key] = approval
        return True


class _Pauses(_Repo):
    async def pause(self, user_id: str, agent_id: str, until: datetime) -> None:
        self.state.pauses[(self.tenant_id, user_id, agent_id)] = until

    async def paused_until(self, user_id: str, agent_id: str) -> datetime | None:
        return self.state.pauses.get((self.tenant_id, user_id, agent_id))


class _Passkeys(_Repo):
    async def add(self, passkey: Passkey) -> None:
        found = self.state.passkeys.get((self.tenant_id, passkey.credential_id))
        if found is not None:
            if found.device_uid != passkey.device_uid:
                raise Conflict("This passkey is registered for another device.")
            return
        self.state.passkeys[(self.tenant_id, passkey.credential_id)] = passkey

    async def get(self, credential_id: str) -> Passkey | None:
        return self.state.passkeys.get((self.tenant_id, credential_id))

    async def for_device(self, device_uid: str) -> Sequence[Passkey]:
        found = of_tenant(self.state.passkeys, self.tenant_id)
        return sorted((p for p in found if p.device_uid == device_uid), key=lambda p: p.created_at)

    async def set_sign_count(self, credential_id: str, sign_count: int) -> None:
        found = self.state.passkeys.get((self.tenant_id, credential_id))
        if found is not None:
            self.state.passkeys[(self.tenant_id, credential_id)] = replace(found, sign_count=sign_count)

    async def required(self, user_id: str) -> bool | None:
        return self.state.passkey_users.get((self.tenant_id, user_id))

    async def set_required(self, user_id: str, required: bool | None) -> None:
        if required is None:
            self.state.passkey_users.pop((self.tenant_id, user_id), None)
        else:
            self.state.passkey_users[(self.tenant_id, user_id)] = required


class _Ingests(_Repo):
    async def receipt(self, device_uid: str, channel: str, digest: str) -> Receipt | None:
        return self.state.receipts.get((self.tenant_id, device_uid, channel, digest))

    async def add_receipt(
        self,
        device_uid: str,
        channel: str,
        digest: str,
        receipt: Receipt,
        received_at: datetime,
        at: datetime,
    ) -> None:
        key = (self.tenant_id, device_uid, channel, digest)
        if key in self.state.receipts:
            raise Conflict("This message was received already.")
        self.state.receipts[key] = receipt

    async def take(self, device_uid: str, day: str, cap: int) -> bool:
        key = (self.tenant_id, device_uid, day)
        if self.state.counters.get(key, 0) >= cap:
            return False
        self.state.counters[key] = self.state.counters.get(key, 0) + 1
        return True

    async def triage(self, device_uid: str, channel: str) -> Triage | None:
        return self.state.triage.get((self.tenant_id, device_uid, channel))

    async def set_triage(
        self, device_uid: str, channel: str, user_id: str, triage: Triage, replace: bool
    ) -> None:
        key = (self.tenant_id, device_uid, channel)
        if key in self.state.triage and not replace:
            raise Conflict("The triage session is pinned already.")
        self.state.triage[key] = triage


class _SignIns(_Repo):
    async def add(self, sign_in: SignIn) -> None:
        self._own(sign_in.tenant_id)
        key = (self.tenant_id, sign_in.sign_in_id)
        if key in self.state.sign_ins:
            raise Conflict("That sign-in exists already.")
        self.state.sign_ins[key] = sign_in

    async def get(self, sign_in_id: str) -> SignIn | None:
        return self.state.sign_ins.get((self.tenant_id, sign_in_id))

    async def save(self, sign_in: SignIn, was: SignInStatus) -> bool:
        key = (self.tenant_id, sign_in.sign_in_id)
        found = self.state.sign_ins.get(key)
        if found is None or found.status is not was:
            return False
        self.state.sign_ins[key] = sign_in
        return True

    async def delete_ended(self, now: datetime, limit: int) -> int:
        ended = sorted(
            (s for s in of_tenant(self.state.sign_ins, self.tenant_id) if s.expires_at < now),
            key=lambda s: s.expires_at,
        )[:limit]
        for sign_in in ended:
            del self.state.sign_ins[(self.tenant_id, sign_in.sign_in_id)]
        return len(ended)


class _ConsoleSessions(_Repo):
    async def add(self, session: ConsoleSession) -> None:
        self._own(session.tenant_id)
        self.state.console_sessions[(self.tenant_id, session.session_id)] = session

    async def get(self, session_id: str) -> ConsoleSession | None:
        return self.state.console_sessions.get((self.tenant_id, session_id))

    async def list_for(self, user_id: str) -> Sequence[ConsoleSession]:
        found = [s for s in of_tenant(self.state.console_sessions, self.tenant_id) if s.user_id == user_id]
        return sorted(found, key=lambda s: s.created_at, reverse=True)[:50]

    async def revoke(self, session_id: str, at: datetime) -> bool:
        key = (self.tenant_id, session_id)
        found = self.state.console_sessions.get(key)
        if found is None or found.revoked_at is not None:
            return False
        self.state.console_sessions[key] = replace(found, revoked_at=at)
        return True

    async def live(self, now: datetime, user_id: str | None = None) -> Sequence[ConsoleSession]:
        found = [
            s
            for s in of_tenant(self.state.console_sessions, self.tenant_id)
            if s.live_at(now) and user_id in (None, s.user_id)
        ]
        return sorted(found, key=lambda s: (s.created_at, s.session_id))

    async def revoke_signed_by(self, approver_uid: str, at: datetime) -> Sequence[str]:
        ids = [
            s.session_id
            for s in of_tenant(self.state.console_sessions, self.tenant_id)
            if s.approver_uid == approver_uid and s.revoked_at is None
        ]
        for session_id in ids:
            key = (self.tenant_id, session_id)
            self.state.console_sessions[key] = replace(self.state.console_sessions[key], revoked_at=at)
        return ids

    async def touch(self, session_id: str, at: datetime) -> None:
        key = (self.tenant_id, session_id)
        found = self.state.console_sessions.get(key)
        if found is not None and (found.last_used_at is None or found.last_used_at < at):
            self.state.console_sessions[key] = replace(found, last_used_at=at)


class _Proofs(_Repo):
    async def issuer_keys(self) -> Sequence[IssuerKey]:
        found = of_tenant(self.state.issuer_keys, self.tenant_id)
        return sorted(found, key=lambda k: (k.created_at, k.kid), reverse=True)

    async def add_issuer_key(self, key: IssuerKey) -> None:
        if (self.tenant_id, key.kid) in self.state.issuer_keys:
            raise Conflict("The tenant has this issuer key already.")
        self.state.issuer_keys[(self.tenant_id, key.kid)] = key

    async def keep_signature(self, signed: SignedDecision) -> None:
        if (self.tenant_id, signed.approval_id) in self.state.signatures:
            raise Conflict("This approval's signature is kept already.")
        self.state.signatures[(self.tenant_id, signed.approval_id)] = signed

    async def signature(self, approval_id: str) -> SignedDecision | None:
        return self.state.signatures.get((self.tenant_id, approval_id))


class _Mandates(_Repo):
    async def add(self, mandate: Mandate) -> None:
        key = (self.tenant_id, mandate.mandate_id)
        if key in self.state.mandates:
            raise Conflict(f"Mandate {mandate.mandate_id!r} exists already.")
        self.state.mandates[key] = mandate

    async def get(self, mandate_id: str) -> Mandate | None:
        return self.state.mandates.get((self.tenant_id, mandate_id))

    async def list_for(self, user_id: str) -> Sequence[Mandate]:
        found = [m for m in of_tenant(self.state.mandates, self.tenant_id) if m.user_id == user_id]
        return sorted(found, key=lambda m: (m.created_at, m.mandate_id), reverse=True)

    async def live_for(self, user_id: str, now: datetime) -> Sequence[Mandate]:
        return [
            m
            for m in await self.list_for(user_id)
            if m.status is MandateStatus.ACTIVE and m.expires_at > now and m.used < m.max_calls
        ]

    async def set_status(
        self, mandate_id: str, was: MandateStatus, status: MandateStatus, at: datetime, by: str
    ) -> bool:
        found = self.state.mandates.get((self.tenant_id, mandate_id))
        if found is None or found.status is not was:
            return False
        self.state.mandates[(self.tenant_id, mandate_id)] = replace(
            found, status=status, decided_at=at, decided_by=by
        )
        return True

    async def ended(self, now: datetime, limit: int) -> Sequence[Mandate]:
        found = [
            m
            for m in of_tenant(self.state.mandates, self.tenant_id)
            if m.status is MandateStatus.ACTIVE and m.expires_at <= now
        ]
        return sorted(found, key=lambda m: (m.expires_at, m.mandate_id))[:limit]

    async def take(self, mandate_id: str, now: datetime) -> int | None:
        m = self.state.mandates.get((self.tenant_id, mandate_id))
        if m is None or m.status is not MandateStatus.ACTIVE or m.expires_at <= now or m.used >= m.max_calls:
            return None
        today = m.used_on(now)
        if m.per_day is not None and today >= m.per_day:
            return None
        taken = replace(m, used=m.used + 1, used_today=today + 1, day=utc_day(now))
        self.state.mandates[(self.tenant_id, mandate_id)] = taken
        return taken.used
