"""The interfaces the use cases need; adapters implement them, bootstrap picks which."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.audit import AuditEntry, AuditRecord


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class Tenants(Protocol):
    async def add(self, tenant: Tenant) -> None:
        """Raises Conflict if the tenant exists."""

    async def get(self) -> Tenant | None:
        """The unit of work's own tenant."""


class Users(Protocol):
    async def add(self, user: User) -> None:
        """Raises Conflict if the user id is taken in this tenant."""

    async def get(self, user_id: str) -> User | None: ...


class Credentials(Protocol):
    async def add(self, credential: Credential) -> None: ...

    async def get(self, credential_id: str) -> Credential | None: ...


class Journal(Protocol):
    async def append(self, record: AuditRecord, at: datetime) -> AuditEntry:
        """Chain ``record`` after the tenant's last entry, in this unit of work."""

    async def read(self, after: int, limit: int) -> Sequence[AuditEntry]:
        """Entries with ``seq > after`` in order, at most ``limit``."""


class UnitOfWork(Protocol):
    """One transaction in one tenant; leaving the block commits it, an exception rolls it back."""

    @property
    def tenant_id(self) -> str: ...
    @property
    def tenants(self) -> Tenants: ...
    @property
    def users(self) -> Users: ...
    @property
    def credentials(self) -> Credentials: ...
    @property
    def journal(self) -> Journal: ...


class Store(Protocol):
    def unit_of_work(self, tenant_id: str) -> AbstractAsyncContextManager[UnitOfWork]: ...

    async def tenant_ids(self) -> Sequence[str]:
        """Every tenant, for maintenance commands (audit verification)."""
        ...

    async def ping(self) -> None:
        """Raise StorageError if the database cannot be reached."""

    async def close(self) -> None: ...
