"""Ingest: a device forwards an SMS it received; tapgate keeps it once, caps it, and hands it to the
agent runtime as untrusted content in the device's standing triage session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import Conflict, RateLimited
from tapgate.domain.events import INGEST_MESSAGE, EventValue
from tapgate.domain.ids import new_id
from tapgate.domain.ingest import FRAMING, Receipt, Triage, check_inbound, seconds_to_next_day, utc_day
from tapgate.domain.principals import Scope
from tapgate.domain.sessions import Session, SessionKind
from tapgate.domain.text import reveal_hidden
from tapgate.ports import UnitOfWork
from tapgate.services.context import Context, events_key
from tapgate.services.devices import DeviceCaller, require_device_scope

ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Ingested:
    receipt: str
    duplicate: bool
    session_id: str


async def ingest(
    ctx: Context, caller: DeviceCaller, channel: str, sender: str, body: str, received_at: datetime
) -> Ingested:
    """Store one received message. A replay answers the first receipt (``duplicate``) and starts nothing.
    Raises InvalidInput, RateLimited (past the device's cap for the server's UTC day: nothing stored)."""
    require_device_scope(caller, Scope.DEVICE_WRITE)
    inbound = check_inbound(channel, sender, body, received_at)
    digest = inbound.digest
    device = caller.device
    for attempt in range(ATTEMPTS):
        now = ctx.clock.now()
        try:
            async with ctx.store.unit_of_work(device.tenant_id) as uow:
                first = await uow.ingests.receipt(device.device_uid, channel, digest)
                if first is not None:
                    return Ingested(first.receipt_id, True, first.session_id)
                if not await uow.ingests.take(device.device_uid, utc_day(now), ctx.limits.ingest_daily_cap):
                    wait = seconds_to_next_day(now)
                    raise RateLimited(
                        f"This device has sent {ctx.limits.ingest_daily_cap} messages today (UTC); "
                        f"the cap resets in {wait} seconds.",
                        retry_after=wait,
                    )
                session_id = await _triage_session(ctx, uow, caller, channel, now)
                body, hidden = reveal_hidden(inbound.body)
                data: dict[str, EventValue] = {
                    "device_id": device.device_id,
                    "channel": channel,
                    "session_id": session_id,
                    "sender": inbound.sender,
                    "body": body,
                    "hidden_characters": hidden,
                    "received_at": inbound.received_at.isoformat(),
                    "trust": "untrusted",
                    "framing": FRAMING,
                }
                await uow.events.append(device.user_id, INGEST_MESSAGE, data, now)
                receipt = Receipt(new_id("rcpt"), session_id)
                await uow.ingests.add_receipt(
                    device.device_uid, channel, digest, receipt, inbound.received_at, now
                )
                await uow.journal.append(
                    AuditRecord(
                        "ingest.received",
                        caller.principal.actor,
                        subject=receipt.receipt_id,
                        data={"device_id": device.device_id, "channel": channel, "session_id": session_id},
                    ),
                    now,
                )
                uow.notify(events_key(device.tenant_id, device.user_id))
            return Ingested(receipt.receipt_id, False, session_id)
        except Conflict:
            # A concurrent replay stored it first, or a concurrent first message pinned the triage
            # session: everything here rolled back; read again.
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


async def _triage_session(
    ctx: Context, uow: UnitOfWork, caller: DeviceCaller, channel: str, now: datetime
) -> str:
    """The device's standing triage session for the channel: made lazily, a new one after it idled."""
    device = caller.device
    pinned = await uow.ingests.triage(device.device_uid, channel)
    idle = timedelta(seconds=ctx.limits.triage_idle_seconds)
    if pinned is not None and now - pinned.last_message_at < idle:
        await uow.ingests.set_triage(
            device.device_uid, channel, device.user_id, Triage(pinned.session_id, now), True
        )
        return pinned.session_id
    session = Session(
        tenant_id=device.tenant_id,
        user_id=device.user_id,
        session_id=new_id("triage", 12),
        agent_id="",  # any agent of the person may work the triage session; none may make it trusted
        kind=SessionKind.TRIAGE,
        attended=False,
        created_at=now,
        updated_at=now,
        latest_device_uid=device.device_uid,
    )
    await uow.sessions.save(session)
    await uow.ingests.set_triage(
        device.device_uid, channel, device.user_id, Triage(session.session_id, now), pinned is not None
    )
    return session.session_id
