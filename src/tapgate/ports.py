"""The interfaces the use cases need; adapters implement them, bootstrap picks which."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.audit import AuditEntry, AuditRecord
from tapgate.domain.devices import Declared, Device, DeviceStatus
from tapgate.domain.pairing import Pairing
from tapgate.domain.push import PushMessage
from tapgate.domain.sessions import Session


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

    async def revoke_device(self, device_uid: str, at: datetime) -> None:
        """Revoke every token of the device."""


class Devices(Protocol):
    async def add(self, device: Device) -> None:
        """Store a device and its capabilities. Raises Conflict if the user has a live device of that id."""

    async def get(self, user_id: str, device_id: str) -> Device | None:
        """The user's live (pending or active) device of that id, with its capabilities."""

    async def by_uid(self, device_uid: str) -> Device | None:
        """Any device of the tenant by its internal id, revoked ones included."""

    async def list(self, user_id: str) -> Sequence[Device]:
        """The user's live devices, oldest first, with their capabilities."""

    async def count_live(self, user_id: str) -> int: ...

    async def set_capabilities(self, device_uid: str, capabilities: Sequence[Declared]) -> None:
        """Replace the device's declared capabilities and their grants."""

    async def set_status(self, device_uid: str, status: DeviceStatus, at: datetime) -> None: ...

    async def touch(self, device_uid: str, at: datetime) -> None:
        """Mark the device present at ``at``."""


class Pairings(Protocol):
    async def add(self, pairing: Pairing) -> None: ...

    async def get(self, pairing_id: str) -> Pairing | None: ...

    async def save(self, pairing: Pairing) -> None: ...


class Sessions(Protocol):
    async def get(self, user_id: str, session_id: str) -> Session | None: ...

    async def save(self, session: Session) -> None:
        """Insert or update the session."""

    async def add_message(
        self, session: Session, device_uid: str | None, capabilities: Sequence[str], at: datetime
    ) -> int:
        """Record one message's device and capabilities (never its text); returns its number."""


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
    @property
    def devices(self) -> Devices: ...
    @property
    def pairings(self) -> Pairings: ...
    @property
    def sessions(self) -> Sessions: ...


class Store(Protocol):
    def unit_of_work(self, tenant_id: str) -> AbstractAsyncContextManager[UnitOfWork]: ...

    async def tenant_ids(self) -> Sequence[str]:
        """Every tenant, for maintenance commands (audit verification)."""
        ...

    async def ping(self) -> None:
        """Raise StorageError if the database cannot be reached."""

    async def close(self) -> None: ...


class PushSender(Protocol):
    """Sends one content-free push to one device through one service (a relay, Web Push, APNs, FCM)."""

    async def send(self, message: PushMessage) -> None:
        """Deliver ``message`` once. Raises PushFailed (``retryable`` says whether to try again) or
        SubscriptionGone (the device's push address is dead and should be dropped)."""
