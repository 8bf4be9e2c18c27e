"""The interfaces the use cases need; adapters implement them, bootstrap picks which."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime
from typing import Literal, Protocol

from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.audit import AuditEntry, AuditRecord
from tapgate.domain.console import ALL_AGENTS, ConsoleSession, SignIn, SignInStatus
from tapgate.domain.devices import Declared, Device, DeviceStatus, Presence, PushTarget
from tapgate.domain.events import Event, EventValue
from tapgate.domain.inbox import Approval
from tapgate.domain.ingest import Receipt, Triage
from tapgate.domain.invocations import Invocation, Status
from tapgate.domain.mandates import Mandate, MandateStatus
from tapgate.domain.pairing import Pairing
from tapgate.domain.passkeys import Passkey
from tapgate.domain.principals import TokenKind
from tapgate.domain.proofs import IssuerKey, SignedDecision
from tapgate.domain.push import OutboxItem, PushMessage
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

    async def set_served(self, url: str, moved_at: datetime | None) -> None:
        """Record the public_url the tenant's devices are served under (and, on a move, when it moved;
        None keeps the time of the last move)."""


class Users(Protocol):
    async def add(self, user: User) -> None:
        """Raises Conflict if the user id is taken in this tenant."""

    async def get(self, user_id: str) -> User | None: ...

    async def list(self) -> Sequence[User]:
        """The tenant's users, by id."""


class Credentials(Protocol):
    async def add(self, credential: Credential) -> None: ...

    async def get(self, credential_id: str) -> Credential | None: ...

    async def revoke_device(self, device_uid: str, at: datetime) -> None:
        """Revoke every token of the device."""

    async def list(self, user_id: str | None = None, kind: TokenKind | None = None) -> Sequence[Credential]:
        """The tenant's unrevoked credentials (of the user, of the kind), oldest first."""

    async def revoke(self, credential_id: str, at: datetime) -> bool:
        """Revoke one credential; False if there is none unrevoked of that id."""

    async def touch(self, used: Mapping[str, datetime]) -> None:
        """Record when each credential was last used (an older time never replaces a newer one)."""


class Devices(Protocol):
    async def add(self, device: Device) -> None:
        """Store a device and its capabilities. Raises Conflict if the user has a live device of that id."""

    async def get(self, user_id: str, device_id: str) -> Device | None:
        """The user's live (pending or active) device of that id, with its capabilities."""

    async def get_with_pause(
        self, user_id: str, device_id: str, agent_id: str = ALL_AGENTS
    ) -> tuple[Device | None, datetime | None, datetime | None]:
        """``get``'s device, the person's pause of every agent (``Pauses.paused_until(user_id,
        ALL_AGENTS)``) and their pause of ``agent_id`` (None where there is no device), in one read where
        the device exists: the check chain's first look at a call."""

    async def by_uid(self, device_uid: str) -> Device | None:
        """Any device of the tenant by its internal id, revoked ones included."""

    async def presence(self, device_uid: str) -> Presence | None:
        """``by_uid``'s status, link and push route alone (one row, no capabilities): what the agent's
        view says of the device."""

    async def list(self, user_id: str) -> Sequence[Device]:
        """The user's live devices, oldest first, with their capabilities."""

    async def count_live(self, user_id: str) -> int: ...

    async def ever(self, user_id: str, device_id: str) -> bool:
        """Whether the user has or had a device of that id (a revoked one counts)."""

    async def set_capabilities(self, device_uid: str, capabilities: Sequence[Declared]) -> None:
        """Replace the device's declared capabilities and their grants."""

    async def set_status(self, device_uid: str, status: DeviceStatus, at: datetime) -> None: ...

    async def touch(self, device_uid: str, at: datetime) -> None:
        """Mark the device present at ``at``."""

    async def set_link(self, device_uid: str, until: datetime | None) -> None:
        """Mark a live link held until ``until`` (None: no live link)."""

    async def hold_links(self, device_uids: Sequence[str], until: datetime) -> None:
        """Hold the live links of every device in ``device_uids`` until ``until``, in one statement (a
        process renews all its links in a few)."""

    async def set_push(self, device_uid: str, target: PushTarget | None) -> None:
        """Replace the device's push target (None: it has none)."""


class Pairings(Protocol):
    async def add(self, pairing: Pairing) -> None: ...

    async def get(self, pairing_id: str, for_update: bool = False) -> Pairing | None:
        """``for_update`` holds the row until the transaction ends (PostgreSQL's SELECT … FOR UPDATE;
        SQLite's transactions are serial already), so a claim or a try is counted once."""

    async def save(self, pairing: Pairing) -> None: ...


class Sessions(Protocol):
    async def get(self, user_id: str, session_id: str) -> Session | None: ...

    async def save(self, session: Session) -> None:
        """Insert or update the session."""

    async def add_message(
        self, session: Session, device_uid: str | None, capabilities: Sequence[str], at: datetime
    ) -> int:
        """Record one message's device and capabilities (never its text); returns its number."""


class Invocations(Protocol):
    async def add(self, invocation: Invocation) -> None:
        """Raises Conflict if the user has a call with this id already (ids are the user's own: two
        users' calls may share one)."""

    async def get(self, user_id: str, invocation_id: str) -> Invocation | None: ...

    async def get_with_presence(
        self, user_id: str, invocation_id: str
    ) -> tuple[Invocation | None, Presence | None]:
        """``get``'s invocation and its device's ``Devices.presence`` (None, None: no such invocation), in
        one read: the agent's view of a call."""

    async def pending_for(self, device_uid: str, limit: int) -> Sequence[Invocation]:
        """The device's pending invocations, oldest first."""

    async def open_for(self, device_uid: str) -> Sequence[Invocation]:
        """The device's pending and awaiting-approval invocations."""

    async def mark_delivered(
        self, user_id: str, device_uid: str, invocation_ids: Sequence[str], at: datetime
    ) -> None:
        """Note that these calls of ``user_id`` were handed to their device now (the long-poll hands them
        again only after ``redelivery_seconds``). Calls of another user or device are left as they are."""

    async def resolve(self, invocation: Invocation) -> bool:
        """Store ``invocation``'s terminal state if the row is still open; False if another answer won."""

    async def answer(
        self,
        user_id: str,
        invocation_id: str,
        device_uid: str,
        status: Status,
        message: str | None,
        at: datetime,
    ) -> Invocation | None:
        """The device's answer to its pending call whose deadline is after ``at``, in one step: the call as
        answered (``status``, ``message`` as given, resolved at ``at``), or None if the call is not that
        (absent, another device's, awaiting approval, answered or due: the caller reads it to say which)."""

    async def answer_with_presence(
        self,
        user_id: str,
        invocation_id: str,
        device_uid: str,
        status: Status,
        message: str | None,
        at: datetime,
    ) -> tuple[Invocation, Presence | None] | None:
        """``answer``, and the answering device's ``Devices.presence``, in one step: for a call that waits
        in this process on an answer that did not come over the device's link."""

    async def proceed(self, invocation: Invocation) -> bool:
        """An approved call goes on: awaiting_approval → pending with its new deadline; False if it was
        no longer waiting."""

    async def count_confirming(self, user_id: str) -> int:
        """Pending calls of the user that put a card in front of them (sms_send, phone_action)."""

    async def add_late_report(
        self, user_id: str, invocation_id: str, status: str, message: str | None, at: datetime
    ) -> bool:
        """Keep a result that came after expiry, once; False if one is kept already."""

    async def due(self, now: datetime, limit: int) -> Sequence[Invocation]:
        """Open invocations whose deadline has passed."""

    async def erase_texts(self, before: datetime, capabilities: Sequence[str]) -> int:
        """Retention: for resolved calls created before ``before``, empty the arguments of the calls to
        ``capabilities`` and every result text (the device's message, a late report's); the rows and
        their argument digests stay. Returns how many rows changed."""

    async def history(
        self, user_id: str, limit: int, agent_id: str | None = None, status: str | None = None
    ) -> Sequence[Invocation]:
        """The user's calls, newest first, optionally of one agent or in one status."""


class Outbox(Protocol):
    async def add(self, item: OutboxItem) -> None: ...

    async def get(self, delivery_id: str) -> OutboxItem | None: ...

    async def for_subject(self, subject_id: str) -> Sequence[OutboxItem]:
        """The rows announcing an invocation, approval or notice, oldest first."""

    async def claim(self, now: datetime, until: datetime, limit: int) -> Sequence[OutboxItem]:
        """Claim up to ``limit`` queued rows due at ``now`` (``not_before`` passed, no live claim), oldest
        first, until ``until``. No other unit of work claims a row, or decides on the tenant's caps,
        until this one ends (PostgreSQL: a transaction lock per tenant; SQLite: the single writer)."""

    async def save(self, item: OutboxItem) -> None:
        """Store the row's state (status, attempts, times, payload, last error) by its delivery id."""

    async def pushed_since(self, user_id: str, since: datetime) -> int:
        """Attempts that went out to the user's devices at or after ``since`` and did not fail for good."""

    async def last_pushed(self, device_uid: str) -> datetime | None:
        """When the device's latest push went out (failed ones aside)."""

    async def next_due(self) -> datetime | None:
        """The earliest moment a queued row can be claimed (its not_before, or when its claim lapses)."""

    async def notices_for(self, device_uid: str, since: datetime) -> Sequence[OutboxItem]:
        """The device's notice rows created at or after ``since`` that nothing carried yet: held, or
        queued with no push attempt out; oldest first."""

    async def linked(self, delivery_ids: Sequence[str], at: datetime) -> int:
        """Mark those of the rows still held or queued as carried by the device's live link (finished,
        their payload dropped); how many were."""

    async def expire_held(self, before: datetime) -> int:
        """Finish the held rows created before ``before`` (skipped: their life is over); how many."""


class Approvals(Protocol):
    async def add(self, approval: Approval) -> None: ...

    async def get(self, approval_id: str) -> Approval | None: ...

    async def pending_for(self, user_id: str) -> Sequence[Approval]:
        """The user's undecided approvals, oldest first."""

    async def count_pending(self, user_id: str) -> int:
        """The user's undecided approvals that a call waits on (a device_pair approval is not an ask)."""

    async def decide(self, approval: Approval) -> bool:
        """Store ``approval``'s decision if it is still pending; False if another decision won."""

    async def erase_texts(self, before: datetime, kinds: Sequence[str]) -> int:
        """Retention: for approvals of ``kinds`` created before ``before``, drop the exact arguments and
        empty the preview's fields (both hold the message); the row and its decision stay."""


class Mandates(Protocol):
    async def add(self, mandate: Mandate) -> None:
        """Raises Conflict if the mandate id is taken."""

    async def get(self, mandate_id: str) -> Mandate | None: ...

    async def list_for(self, user_id: str) -> Sequence[Mandate]:
        """Every mandate of the user, newest first."""

    async def live_for(self, user_id: str, now: datetime) -> Sequence[Mandate]:
        """The user's signed mandates inside their window with a call left in all (per_day unread)."""

    async def set_status(
        self, mandate_id: str, was: MandateStatus, status: MandateStatus, at: datetime, by: str
    ) -> bool:
        """Move the mandate from ``was`` to ``status``; False if it was no longer ``was``."""

    async def ended(self, now: datetime, limit: int) -> Sequence[Mandate]:
        """Up to ``limit`` of the tenant's signed mandates whose window closed by ``now``, still stored as
        active: what the expiry sweep marks expired and announces."""

    async def take(self, mandate_id: str, now: datetime) -> int | None:
        """Spend one use at once (one statement, so two transactions never spend the same one): only while
        it is active, inside its window, with a call left in all and in ``now``'s UTC day. The new count
        of uses, or None when none was left."""


class Pauses(Protocol):
    async def pause(self, user_id: str, agent_id: str, until: datetime) -> None: ...

    async def paused_until(self, user_id: str, agent_id: str) -> datetime | None: ...


class SignIns(Protocol):
    async def add(self, sign_in: SignIn) -> None: ...

    async def get(self, sign_in_id: str) -> SignIn | None: ...

    async def save(self, sign_in: SignIn, was: SignInStatus) -> bool:
        """Store ``sign_in`` (its status, user, approval and approver) if its row is still in status
        ``was``; False if another request moved it."""

    async def delete_ended(self, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` sign-ins that expired before ``now``; how many."""


class ConsoleSessions(Protocol):
    async def add(self, session: ConsoleSession) -> None: ...

    async def get(self, session_id: str) -> ConsoleSession | None: ...

    async def list_for(self, user_id: str) -> Sequence[ConsoleSession]:
        """The user's sessions, newest first, revoked and expired ones included."""

    async def revoke(self, session_id: str, at: datetime) -> bool:
        """Revoke a live session; False if it was revoked already or does not exist."""

    async def live(self, now: datetime, user_id: str | None = None) -> Sequence[ConsoleSession]:
        """The tenant's (or the user's) sessions neither revoked nor expired at ``now``, oldest first."""

    async def revoke_signed_by(self, approver_uid: str, at: datetime) -> Sequence[str]:
        """Revoke every unrevoked session the device signed in; their ids."""

    async def touch(self, session_id: str, at: datetime) -> None:
        """Record when the session was last used (an older time never replaces a newer one)."""


class Passkeys(Protocol):
    """A device's WebAuthn credentials (its passkeys), and each user's own require_user_verification."""

    async def add(self, passkey: Passkey) -> None:
        """Register it; the same credential id registered again for the same device keeps its row.
        Raises Conflict when the id belongs to another device."""

    async def get(self, credential_id: str) -> Passkey | None: ...

    async def for_device(self, device_uid: str) -> Sequence[Passkey]: ...

    async def set_sign_count(self, credential_id: str, sign_count: int) -> None: ...

    async def required(self, user_id: str) -> bool | None:
        """The user's own setting; None: the global one applies."""

    async def set_required(self, user_id: str, required: bool | None) -> None: ...


class Ingests(Protocol):
    async def receipt(self, device_uid: str, channel: str, digest: str) -> Receipt | None: ...

    async def add_receipt(
        self,
        device_uid: str,
        channel: str,
        digest: str,
        receipt: Receipt,
        received_at: datetime,
        at: datetime,
    ) -> None:
        """Raises Conflict if the digest was stored already (a replay)."""

    async def take(self, device_uid: str, day: str, cap: int) -> bool:
        """Count one message for the device's day; False (and nothing counted) at the cap."""

    async def triage(self, device_uid: str, channel: str) -> Triage | None: ...

    async def set_triage(
        self, device_uid: str, channel: str, user_id: str, triage: Triage, replace: bool
    ) -> None:
        """Pin (or, with ``replace``, move) the triage session; raises Conflict if one is pinned and not
        replaced."""


class Events(Protocol):
    async def append(self, user_id: str, type: str, data: Mapping[str, EventValue], at: datetime) -> None:
        """Add an event for the user; its sequence number grows in commit order within the tenant, and it
        is readable once this unit of work commits (a store may number it then, not now)."""

    async def read(self, user_id: str, after: int, limit: int) -> Sequence[Event]: ...

    async def erase_bodies(
        self, type: str, fields: Sequence[str], before: datetime, after: int | None = None
    ) -> tuple[int, int]:
        """Retention: empty ``fields`` of the events of ``type`` made before ``before`` (each keeps an
        ``erased: true``); the events stay. Returns how many changed, and the number up to which every
        event was made before ``before``. Passed back as ``after`` to the next round, that number keeps
        its search to what was numbered since and is old by then; without ``after``, every event of the
        tenant is looked at (made before ``before`` in any order, as after a clock set wrong)."""


class Journal(Protocol):
    async def append(self, record: AuditRecord, at: datetime) -> None:
        """Chain ``record`` after the tenant's last committed entry: it is readable, numbered and hashed,
        once this unit of work commits (a store may place it then, not now)."""

    async def read(self, after: int, limit: int) -> Sequence[AuditEntry]:
        """Entries with ``seq > after`` in order, at most ``limit``."""

    async def head(self) -> tuple[int, str] | None:
        """The last entry's number and hash as the chain's head records them; None for no tenant."""

    async def find(self, action: str, subject: str) -> Sequence[AuditEntry]:
        """The committed entries of ``action`` about ``subject``, in order."""


class Proofs(Protocol):
    """The tenant's issuer keys, and what devices signed to decide approvals."""

    async def issuer_keys(self) -> Sequence[IssuerKey]:
        """Every issuer key of the tenant, newest first."""

    async def add_issuer_key(self, key: IssuerKey) -> None:
        """Raises Conflict if the tenant has that key already."""

    async def keep_signature(self, signed: SignedDecision) -> None: ...

    async def signature(self, approval_id: str) -> SignedDecision | None: ...


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
    @property
    def invocations(self) -> Invocations: ...
    @property
    def events(self) -> Events: ...
    @property
    def outbox(self) -> Outbox: ...
    @property
    def approvals(self) -> Approvals: ...
    @property
    def pauses(self) -> Pauses: ...
    @property
    def mandates(self) -> Mandates: ...
    @property
    def proofs(self) -> Proofs: ...
    @property
    def passkeys(self) -> Passkeys: ...
    @property
    def ingests(self) -> Ingests: ...
    @property
    def sign_ins(self) -> SignIns: ...
    @property
    def console_sessions(self) -> ConsoleSessions: ...

    def notify(self, key: str) -> None:
        """Wake every waiter on ``key`` once this unit of work commits (in every process)."""

    def hand(self, key: str, value: object) -> None:
        """``notify(key)``, and hand ``value`` (what this unit of work wrote, as written) to the waiters
        on ``key`` in this process that can take it instead of reading it (``Wake.handed``)."""


class Store(Protocol):
    def unit_of_work(self, tenant_id: str) -> AbstractAsyncContextManager[UnitOfWork]: ...

    def reading(self, tenant_id: str) -> AbstractAsyncContextManager[UnitOfWork]:
        """A unit of work that only reads, with the hot reads only (the device's pending calls, a
        call, a device's presence): each read sees what was committed before it began, as in any unit
        of work, and may be a transaction of its own. Writing, or waking, in it is a mistake."""
        ...

    async def tenant_ids(self) -> Sequence[str]:
        """Every tenant, for maintenance commands (audit verification)."""
        ...

    async def ping(self) -> None:
        """Raise StorageError if the database cannot be reached."""

    async def close(self) -> None: ...


class Settable(Protocol):
    """What a notification sets besides a waiter's own event (``Wake.subscribe``'s ``also``)."""

    def set(self) -> None: ...


class Woken(Protocol):
    """What a waiter holds: set by a notification on its key (an ``asyncio.Event`` is one, as is
    ``tapgate.flag.Flag``)."""

    def is_set(self) -> bool: ...
    def set(self) -> None: ...
    def clear(self) -> None: ...
    async def wait(self) -> Literal[True]: ...


class Wake(Protocol):
    """Waiters and the notifications that wake them. A waiter subscribes before it reads the state it
    waits on, so a notification between the read and the wait is never lost."""

    degraded: bool  # notifications may be missed just now: waiters also re-read on an interval

    def subscribe(
        self, key: str, swept: bool = True, also: Settable | None = None
    ) -> AbstractContextManager[Woken]:
        """An event set when ``key`` is notified. A waiter that recovers a missed notification by other
        means (a live link: its push, its next wake) passes ``swept=False`` and is left out of any sweep
        that wakes every waiter on a timer, so an idle link stays idle. Whenever the event is set, so is
        ``also``: a waiter on several keys waits on that one event, and asks each which key woke it."""

    def notify(self, key: str) -> None: ...

    def hand(self, key: str, values: Sequence[object]) -> None:
        """``notify(key)``, handing ``values`` to this process's waiters that subscribed with ``also``."""

    def handed(self, woken: Woken) -> list[object] | None:
        """What hand-offs set ``woken`` since it was last cleared, or None if anything else set it too
        (then the waiter must read)."""

    def listen(self, callback: Callable[[str | None], None]) -> None:
        """Also tell ``callback`` every notified key (None: anything may have changed)."""


class PushSender(Protocol):
    """Sends one content-free push to one device through one service (a relay, Web Push, APNs, FCM)."""

    def serves(self, kind: str) -> bool:
        """Whether this sender delivers to devices whose push target is of ``kind``."""
        ...

    async def send(self, message: PushMessage) -> None:
        """Deliver ``message`` once. Raises PushFailed (``retryable`` says whether to try again) or
        SubscriptionGone (the device's push address is dead and should be dropped)."""
