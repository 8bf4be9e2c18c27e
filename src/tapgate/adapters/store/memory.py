"""An in-memory Store: a real adapter that passes the store contract suite, for simulations and tests.

A unit of work works on a copy of the state and swaps it in on success, so a failed block leaves nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.audit import GENESIS, AuditEntry, AuditRecord, chain_entry
from tapgate.domain.errors import Conflict, StorageError


@dataclass
class _State:
    tenants: dict[str, Tenant] = field(default_factory=dict)
    users: dict[tuple[str, str], User] = field(default_factory=dict)
    credentials: dict[tuple[str, str], Credential] = field(default_factory=dict)
    audit: dict[str, list[AuditEntry]] = field(default_factory=dict)

    def copy(self) -> _State:
        return _State(
            dict(self.tenants),
            dict(self.users),
            dict(self.credentials),
            {k: list(v) for k, v in self.audit.items()},
        )


class MemoryStore:
    def __init__(self) -> None:
        self._state = _State()
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def unit_of_work(self, tenant_id: str) -> AsyncIterator[MemoryUnitOfWork]:
        async with self._lock:
            work = self._state.copy()
            yield MemoryUnitOfWork(work, tenant_id)
            self._state = work

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


class _Repo:
    def __init__(self, state: _State, tenant_id: str) -> None:
        self.state = state
        self.tenant_id = tenant_id

    def _own(self, tenant_id: str) -> None:
        # What row-level security's WITH CHECK does on PostgreSQL.
        if tenant_id != self.tenant_id:
            raise StorageError("A row for another tenant cannot be written in this unit of work.")


class _Tenants(_Repo):
    async def add(self, tenant: Tenant) -> None:
        self._own(tenant.tenant_id)
        if tenant.tenant_id in self.state.tenants:
            raise Conflict(f"A tenant named {tenant.tenant_id!r} exists; pick another name.")
        self.state.tenants[tenant.tenant_id] = tenant
        self.state.audit[tenant.tenant_id] = []

    async def get(self) -> Tenant | None:
        return self.state.tenants.get(self.tenant_id)


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


class _Credentials(_Repo):
    async def add(self, credential: Credential) -> None:
        self._own(credential.tenant_id)
        key = (credential.tenant_id, credential.credential_id)
        if key in self.state.credentials:
            raise Conflict("That credential exists already.")
        self.state.credentials[key] = replace(credential)

    async def get(self, credential_id: str) -> Credential | None:
        return self.state.credentials.get((self.tenant_id, credential_id))


class _Journal(_Repo):
    async def append(self, record: AuditRecord, at: datetime) -> AuditEntry:
        chain = self.state.audit.get(self.tenant_id)
        if chain is None:
            raise StorageError(f"Tenant {self.tenant_id!r} has no audit journal; was it created?")
        prev = chain[-1].hash if chain else GENESIS
        entry = chain_entry(self.tenant_id, len(chain) + 1, at, record, prev)
        chain.append(entry)
        return entry

    async def read(self, after: int, limit: int) -> Sequence[AuditEntry]:
        return self.state.audit.get(self.tenant_id, [])[after : after + limit]
