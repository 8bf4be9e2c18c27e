"""The hot statements, built once with bound parameters.

Building a SQLAlchemy statement costs about seven times what executing a built one does, so the
statements on every request's path live here as constants; each takes ``tenant`` and its own values as
parameters. Rarely run statements are built where they are used. The ones marked hot (these, and each
table's INSERT) run straight on the driver on SQLite (``sqlite_raw.py``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, case, func, literal_column, or_, select, update

from tapgate.adapters.store import tables as t
from tapgate.adapters.store.tenancy import join, scoped
from tapgate.domain.capabilities import CONFIRMED_ON_SCREEN
from tapgate.domain.devices import DeviceStatus
from tapgate.domain.inbox import ApprovalStatus
from tapgate.domain.invocations import OPEN, Status
from tapgate.domain.mandates import MandateStatus

_cred = t.credentials.c
_dev = t.devices.c
_cap = t.capabilities.c
_inv = t.invocations.c
_head = t.audit_heads.c
_evt = t.events.c
_ses = t.sessions.c
_apr = t.approvals.c
_pause = t.agent_pauses.c

# A live device: the ``devices_live_id`` index's own predicate, with its value written in. Bound as a
# parameter, the value keeps SQLite from knowing the partial index applies until it is bound, so SQLite
# prepares the statement again on every run (the check chain's device lookup among them), and a
# PostgreSQL generic plan cannot use the index at all.
LIVE = _dev.status != literal_column(f"'{DeviceStatus.REVOKED.value}'")

CREDENTIAL = scoped(select(t.credentials)).where(_cred.credential_id == bindparam("id"))

_DEVICES = scoped(select(t.devices)).order_by(_dev.created_at, _dev.device_uid)
DEVICE_PRESENCE = scoped(select(_dev.status, _dev.link_until, _dev.push_kind)).where(
    _dev.device_uid == bindparam("uid")
)
LIVE_DEVICES = _DEVICES.where(_dev.user_id == bindparam("user"), LIVE)
_CAPABILITIES = scoped(select(_cap.device_uid, _cap.definition, _cap.granted)).order_by(
    _cap.device_uid, _cap.position
)
CAPABILITIES = _CAPABILITIES.where(_cap.device_uid.in_(bindparam("uids", expanding=True)))
CAPABILITIES_OF = _CAPABILITIES.where(_cap.device_uid == bindparam("uid"))
# One device with its capabilities in one statement: a row per capability (one with none if it has none).
_WITH_CAPABILITIES = scoped(
    select(t.devices, _cap.definition, _cap.granted),
    over=join(t.devices, t.capabilities, _cap.device_uid == _dev.device_uid, outer=True),
).order_by(_dev.created_at, _dev.device_uid, _cap.position)
DEVICE_BY_UID_WITH_CAPABILITIES = _WITH_CAPABILITIES.where(_dev.device_uid == bindparam("uid"))
LIVE_DEVICE_WITH_CAPABILITIES = _WITH_CAPABILITIES.where(
    _dev.user_id == bindparam("user"),
    _dev.device_id == bindparam("device"),
    LIVE,
)
TOUCH_DEVICE = (
    scoped(update(t.devices)).where(_dev.device_uid == bindparam("uid")).values(last_seen_at=bindparam("at"))
)
LINK_DEVICE = (
    scoped(update(t.devices)).where(_dev.device_uid == bindparam("uid")).values(link_until=bindparam("until"))
)

INVOCATION = scoped(select(t.invocations)).where(
    _inv.user_id == bindparam("user"), _inv.invocation_id == bindparam("id")
)
# A call and its device's presence (``DEVICE_PRESENCE``), one statement: the agent's view of a call.
INVOCATION_WITH_PRESENCE = scoped(
    select(
        t.invocations,
        _dev.status.label("device_status"),
        _dev.link_until.label("device_link_until"),
        _dev.push_kind.label("device_push_kind"),
    ),
    over=join(t.invocations, t.devices, _dev.device_uid == _inv.device_uid, outer=True),
).where(_inv.user_id == bindparam("user"), _inv.invocation_id == bindparam("id"))
PENDING_FOR = (
    scoped(select(t.invocations))
    .where(_inv.device_uid == bindparam("uid"), _inv.status == Status.PENDING.value)
    .order_by(_inv.created_at, _inv.invocation_id)
    .limit(bindparam("limit"))
)
OPEN_FOR = scoped(select(t.invocations)).where(_inv.device_uid == bindparam("uid"), _inv.status.in_(OPEN))
# A mark names its call by the whole primary key (the user with the id), one call a statement: given only
# the tenant, the device and the id, or three ids or more in an IN list, SQLite (which has no statistics)
# searches the device's index instead, every call the device ever had.
MARK_ONE_DELIVERED = (
    scoped(update(t.invocations))
    .values(delivered_at=bindparam("at"))
    .where(
        _inv.user_id == bindparam("user"),
        _inv.invocation_id == bindparam("id"),
        _inv.device_uid == bindparam("uid"),
    )
)
RESOLVE = (
    scoped(update(t.invocations))
    .where(
        _inv.user_id == bindparam("user"),
        _inv.invocation_id == bindparam("id"),
        _inv.status.in_(OPEN),
    )
    .values(
        status=bindparam("status"),
        resolved_at=bindparam("resolved_at"),
        message=bindparam("message"),
        reason=bindparam("reason"),
    )
)
# A device's answer to its pending call before the call's deadline, in one statement (``Invocations.answer``).
ANSWER = (
    scoped(update(t.invocations))
    .where(
        _inv.user_id == bindparam("user"),
        _inv.invocation_id == bindparam("id"),
        _inv.device_uid == bindparam("uid"),
        _inv.status == Status.PENDING.value,
        _inv.expires_at > bindparam("at"),
    )
    .values(status=bindparam("status"), resolved_at=bindparam("at"), message=bindparam("message"))
    .returning(*t.invocations.c)
)


def _of_its_device(column: Any, label: str) -> Any:
    """A column of the updated call's device, for a RETURNING clause (a subquery: both engines' RETURNING
    name only the updated table's columns). The call's columns are written out with their table: SQLAlchemy
    writes every column of SQLite's RETURNING bare, and inside the subquery a bare ``tenant_id`` is the
    device's own, which would match every device."""
    return (
        scoped(select(column), literal_column("invocations.tenant_id"))
        .where(_dev.device_uid == literal_column("invocations.device_uid"))
        .scalar_subquery()
        .label(label)
    )


# The answer with its device's presence (``DEVICE_PRESENCE``), one statement: for a call that waits in
# this process on an answer that did not come over the device's link (a long-poll device's answer).
ANSWER_WITH_PRESENCE = ANSWER.returning(
    _of_its_device(_dev.status, "device_status"),
    _of_its_device(_dev.link_until, "device_link_until"),
    _of_its_device(_dev.push_kind, "device_push_kind"),
)
# The person's calls that wait for them to confirm on a device, counted through their devices: by the
# calls' index of device and status, the person's own pending calls only. (Asked by status alone, SQLite
# took the index of every tenant's open calls, and counted through all of them.)
COUNT_CONFIRMING = scoped(select(func.count()), over=t.invocations).where(
    _inv.device_uid.in_(scoped(select(_dev.device_uid)).where(_dev.user_id == bindparam("user"))),
    _inv.user_id == bindparam("user"),
    _inv.status == Status.PENDING.value,
    _inv.capability.in_(CONFIRMED_ON_SCREEN),
)

# The tenant's chain head: the journal's last number and hash, the last event number, and whether
# entries or events wait to be sealed (sql_journal.py). On SQLite a writer reads it (one writer at a time:
# it holds it); on PostgreSQL a reader or the sealer that must seal waits for it.
_pending = or_(
    scoped(select(t.audit_pending.c.key)).exists(),
    scoped(select(t.events_pending.c.key)).exists(),
)
CHAIN_HEAD = scoped(select(_head.seq, _head.hash, _head.event_seq, _pending.label("pending")))
CHAIN_HEAD_WAIT = CHAIN_HEAD.with_for_update()
MOVE_CHAIN_HEAD = scoped(update(t.audit_heads)).values(
    seq=bindparam("seq"), hash=bindparam("hash"), event_seq=bindparam("event_seq")
)
EVENTS_AFTER = (
    scoped(select(t.events))
    .where(_evt.user_id == bindparam("user"), _evt.seq > bindparam("after"))
    .order_by(_evt.seq)
    .limit(bindparam("limit"))
)

SESSION = scoped(select(t.sessions)).where(
    _ses.user_id == bindparam("user"), _ses.session_id == bindparam("session")
)
COUNT_PENDING_APPROVALS = scoped(select(func.count()), over=t.approvals).where(
    _apr.user_id == bindparam("user"), _apr.status == ApprovalStatus.PENDING.value
)
PAUSED_UNTIL = scoped(select(_pause.until)).where(
    _pause.user_id == bindparam("user"), _pause.agent_id == bindparam("agent")
)
# A live device with its capabilities, the person's pause of every agent ("agent": ALL_AGENTS) and their
# pause of this call's agent ("caller"), one statement: the check chain's first look at a call.
LIVE_DEVICE_WITH_PAUSE = LIVE_DEVICE_WITH_CAPABILITIES.add_columns(
    PAUSED_UNTIL.scalar_subquery().label("paused_until"),
    scoped(select(_pause.until))
    .where(_pause.user_id == bindparam("user"), _pause.agent_id == bindparam("caller"))
    .scalar_subquery()
    .label("agent_paused_until"),
)

_mnd = t.mandates.c
_ACTIVE_MANDATE = _mnd.status == literal_column(f"'{MandateStatus.ACTIVE.value}'")
# The person's signed mandates inside their window with a call left in all: what may cover a call.
LIVE_MANDATES = scoped(select(t.mandates)).where(
    _mnd.user_id == bindparam("user"),
    _ACTIVE_MANDATE,
    _mnd.expires_at > bindparam("now"),
    _mnd.used < _mnd.max_calls,
)
# One use spent in one conditional statement: a concurrent one waits on the row (PostgreSQL) or the write
# lock (SQLite) and then finds the counts it left, so a use is never spent twice. On PostgreSQL it returns
# the count; SQLite runs it two to four times slower than the UPDATE alone (its result goes through a
# table made and dropped each time), so there the count is read after it (``MANDATE_USED``), still under
# the write lock the UPDATE took.
SPEND_MANDATE = (
    scoped(update(t.mandates))
    .where(
        _mnd.mandate_id == bindparam("id"),
        _ACTIVE_MANDATE,
        _mnd.expires_at > bindparam("now"),
        _mnd.used < _mnd.max_calls,
        or_(_mnd.per_day.is_(None), _mnd.day != bindparam("day"), _mnd.used_today < _mnd.per_day),
    )
    .values(
        used=_mnd.used + 1,
        used_today=case((_mnd.day == bindparam("day"), _mnd.used_today + 1), else_=literal_column("1")),
        day=bindparam("day"),
    )
)
TAKE_MANDATE = SPEND_MANDATE.returning(_mnd.used)
MANDATE_USED = scoped(select(_mnd.used)).where(_mnd.mandate_id == bindparam("id"))

_rcpt = t.ingest_receipts.c
_count = t.ingest_counters.c
_tri = t.triage_sessions.c
_msg = t.session_messages.c
RECEIPT = scoped(select(_rcpt.receipt_id, _rcpt.session_id)).where(
    _rcpt.device_uid == bindparam("uid"),
    _rcpt.channel == bindparam("via"),
    _rcpt.digest == bindparam("digest"),
)
_TODAY = (_count.device_uid == bindparam("uid"), _count.day == bindparam("today"))
COUNT_INGEST = (
    scoped(update(t.ingest_counters))
    .where(*_TODAY, _count.count < bindparam("cap"))
    .values(count=_count.count + 1)
)
INGEST_COUNT = scoped(select(_count.count)).where(*_TODAY)
_TRIAGE = (_tri.device_uid == bindparam("uid"), _tri.channel == bindparam("via"))
TRIAGE = scoped(select(_tri.session_id, _tri.last_message_at)).where(*_TRIAGE)
MOVE_TRIAGE = (
    scoped(update(t.triage_sessions))
    .where(*_TRIAGE)
    .values(session_id=bindparam("session"), last_message_at=bindparam("at"))
)
LAST_MESSAGE = scoped(select(func.max(_msg.seq))).where(
    _msg.user_id == bindparam("user"), _msg.session_id == bindparam("session")
)
DECIDE = (
    scoped(update(t.approvals))
    .where(
        _apr.approval_id == bindparam("id"),
        _apr.status == ApprovalStatus.PENDING.value,
    )
    .values(status=bindparam("status"), decided_at=bindparam("decided_at"), decided_by=bindparam("by"))
)

_hot: dict[int, Any] = {}  # id → statement; each is held here for the process's life, so no id is reused


def hot(statement: Any) -> Any:
    """Mark a statement built once for the process's life as one every request runs."""
    _hot[id(statement)] = statement
    return statement


def is_hot(statement: Any) -> bool:
    return id(statement) in _hot


for _statement in (
    CREDENTIAL,
    DEVICE_PRESENCE,
    LIVE_DEVICES,
    CAPABILITIES_OF,
    DEVICE_BY_UID_WITH_CAPABILITIES,
    LIVE_DEVICE_WITH_CAPABILITIES,
    LIVE_DEVICE_WITH_PAUSE,
    LIVE_MANDATES,
    TAKE_MANDATE,
    SPEND_MANDATE,
    MANDATE_USED,
    TOUCH_DEVICE,
    LINK_DEVICE,
    INVOCATION,
    INVOCATION_WITH_PRESENCE,
    PENDING_FOR,
    OPEN_FOR,
    MARK_ONE_DELIVERED,
    RESOLVE,
    ANSWER,
    ANSWER_WITH_PRESENCE,
    COUNT_CONFIRMING,
    CHAIN_HEAD,
    MOVE_CHAIN_HEAD,
    EVENTS_AFTER,
    SESSION,
    COUNT_PENDING_APPROVALS,
    PAUSED_UNTIL,
    RECEIPT,
    COUNT_INGEST,
    INGEST_COUNT,
    TRIAGE,
    MOVE_TRIAGE,
    LAST_MESSAGE,
    DECIDE,
):
    hot(_statement)
