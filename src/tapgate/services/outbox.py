"""The push outbox: claim the rows that are due, decide, send through the PushSender, record the outcome.

    a row commits ── {tenant}:outbox ──> claim (one transaction per tenant and batch)
        ├─ skipped    the call was fetched or is over, the approval decided, the device has no push
        ├─ coalesced, deferred, capped   (domain.push.plan_pushes: one push per device and burst, the cap)
        └─ send ──> sent
                 └─> failed: tried again after push_retry_seconds while retryable; then push.failed in
                     the journal; a dead address (SubscriptionGone) is removed from the device

A claim lasts ``push_lease_seconds``. A worker that dies mid-send leaves its rows to whichever worker
claims them once the lease lapses (another process, or this one after a restart), so a queued push is
still sent after a crash: at least once, and once unless the crash fell between the send and its
record. Each send records its own outcome, so a failing or slow target never holds up another.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from tapgate import faults
from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import Device, DeviceStatus
from tapgate.domain.errors import PushFailed, SubscriptionGone
from tapgate.domain.events import APPROVAL_REQUESTED
from tapgate.domain.ids import new_id
from tapgate.domain.inbox import ApprovalStatus
from tapgate.domain.invocations import Status
from tapgate.domain.push import (
    INVOCATION_PENDING,
    OutboxItem,
    OutboxStatus,
    PushMessage,
    plan_pushes,
    retry_at,
)
from tapgate.ports import PushSender, UnitOfWork
from tapgate.services.context import Context, outbox_key

log = logging.getLogger(__name__)
ACTOR = "system:push"
ERROR_MAX = 200


async def queue_push(
    uow: UnitOfWork, device: Device, event: str, subject_id: str, now: datetime, delay_seconds: float = 0
) -> None:
    """Queue a content-free push to ``device`` announcing ``subject_id``, in the transaction of what it
    announces, and wake the push worker; nothing is queued for a device without a push target."""
    if device.push is None:
        return
    await uow.outbox.add(
        OutboxItem(
            tenant_id=device.tenant_id,
            delivery_id=new_id("push"),
            device_uid=device.device_uid,
            user_id=device.user_id,
            event=event,
            subject_id=subject_id,
            not_before=now + timedelta(seconds=delay_seconds),
            created_at=now,
        )
    )
    uow.notify(outbox_key(device.tenant_id))


@dataclass
class PushStats:
    """What this process's worker did since it started (the Prometheus counters read these)."""

    sent: int = 0
    failed: int = 0
    retried: int = 0
    skipped: int = 0
    coalesced: int = 0
    capped: int = 0


@dataclass(frozen=True, slots=True)
class Send:
    """A claimed row on its way out, and the message it becomes."""

    item: OutboxItem
    message: PushMessage


@dataclass(frozen=True, slots=True)
class Claimed:
    rows: int  # how many rows the claim took, whatever became of them
    sends: tuple[Send, ...]
    next_due: datetime | None  # when the tenant's next queued row can be claimed


async def claim(ctx: Context, sender: PushSender, tenant_id: str, limit: int, stats: PushStats) -> Claimed:
    """Claim up to ``limit`` due rows of the tenant and settle every one that will not be sent now; the
    rest come back as sends, their attempt counted and their claim running."""
    now = ctx.clock.now()
    limits = ctx.limits
    async with ctx.store.unit_of_work(tenant_id) as uow:
        claimed = await uow.outbox.claim(now, now + timedelta(seconds=limits.push_lease_seconds), limit)
        devices: dict[str, Device | None] = {}
        live: list[OutboxItem] = []
        for item in claimed:
            if item.device_uid not in devices:
                devices[item.device_uid] = await uow.devices.by_uid(item.device_uid)
            reason = await _stale(uow, sender, item, devices[item.device_uid], now)
            if reason is None:
                live.append(item)
                continue
            await uow.outbox.save(_finished(item, OutboxStatus.SKIPPED, now, reason))
            stats.skipped += 1
        since = now - timedelta(seconds=limits.push_window_seconds)
        plan = plan_pushes(
            live,
            now,
            {user: await uow.outbox.pushed_since(user, since) for user in {i.user_id for i in live}},
            {uid: await uow.outbox.last_pushed(uid) for uid in {i.device_uid for i in live}},
            limits.push_cap,
            limits.push_coalesce_seconds,
        )
        for item in plan.coalesced:
            await uow.outbox.save(_finished(item, OutboxStatus.COALESCED, now))
        stats.coalesced += len(plan.coalesced)
        for item, until in plan.deferred:
            await uow.outbox.save(replace(item, not_before=until, claimed_until=None))
        for item in plan.capped:
            await uow.outbox.save(_finished(item, OutboxStatus.CAPPED, now))
            await _journal(uow, "push.capped", "capped", item, devices[item.device_uid], now)
        stats.capped += len(plan.capped)
        sends = []
        for item in plan.send:
            started = replace(item, attempts=item.attempts + 1, pushed_at=now)
            await uow.outbox.save(started)
            device = devices[item.device_uid]
            assert device is not None and device.push is not None  # _stale let it through
            sends.append(Send(started, started.message(device.device_id, device.push)))
        next_due = await uow.outbox.next_due()
    return Claimed(len(claimed), tuple(sends), next_due)


async def _stale(
    uow: UnitOfWork, sender: PushSender, item: OutboxItem, device: Device | None, now: datetime
) -> str | None:
    """Why the row announces nothing any more (live first: a fetched call needs no push), or None."""
    if device is None or device.status is not DeviceStatus.ACTIVE or device.push is None:
        return "the device is gone or has no push target"
    if not sender.serves(device.push.kind):
        return f"no push sender or relay serves {device.push.kind!r}"
    if item.event == INVOCATION_PENDING:
        invocation = await uow.invocations.get(item.user_id, item.subject_id)
        if invocation is None or invocation.status is not Status.PENDING:
            return "the call is no longer pending"
        if invocation.delivered_at is not None:
            return "the device has the call already"
    elif item.event == APPROVAL_REQUESTED:
        approval = await uow.approvals.get(item.subject_id)
        if approval is None or approval.status is not ApprovalStatus.PENDING or approval.expires_at <= now:
            return "the approval is no longer open"
    return None


async def send(ctx: Context, sender: PushSender, out: Send, stats: PushStats) -> None:
    """Send one claimed row and record the outcome; never raises for the push's own failure."""
    failure: PushFailed | None = None
    try:
        # The sender bounds its own time; this bound only keeps a stuck one inside the claim's lease.
        await asyncio.wait_for(sender.send(out.message), timeout=ctx.limits.push_lease_seconds / 2)
    except PushFailed as e:
        failure = e
    except TimeoutError:
        failure = PushFailed("The push sender did not finish in time.", retryable=True)
    except Exception as e:  # a bug in a sender must not lose the row: it is tried again
        log.error("push sender broke", extra={"error": type(e).__name__, "delivery_id": out.item.delivery_id})
        failure = PushFailed(f"The push sender failed ({type(e).__name__}).", retryable=True)
    # Killed here, the push went out and its row still says queued under a claim: once the lease lapses a
    # worker sends it again, with the same delivery_id. At least once; a relay's delivery cache (and a
    # device keeping the delivery_ids it has shown) makes it once for the person (docs/reliability.md).
    faults.crash_point("push.after_send")
    await record(ctx, out, failure, stats)


async def record(ctx: Context, out: Send, failure: PushFailed | None, stats: PushStats) -> None:
    """Store what became of an attempt: sent, to be tried again, or failed for good (journalled)."""
    now = ctx.clock.now()
    item = out.item
    async with ctx.store.unit_of_work(item.tenant_id) as uow:
        current = await uow.outbox.get(item.delivery_id)
        if current is None or current.status is not OutboxStatus.QUEUED:
            return
        if current.claimed_until != item.claimed_until:
            return  # our claim lapsed and another worker took the row: its attempt is the one to record
        if failure is None:
            await uow.outbox.save(_finished(current, OutboxStatus.SENT, now))
            stats.sent += 1
            return
        error = failure.message[:ERROR_MAX]
        log.warning(
            "push attempt failed",
            extra={
                "delivery_id": item.delivery_id,
                "attempt": item.attempts,
                "reason": error,
                "retryable": failure.retryable,
            },
        )
        again = None if isinstance(failure, SubscriptionGone) else _retry(ctx, current, failure, now)
        if again is not None:
            # The failed attempt never reached the person: it counts for no cap and no pause.
            retry = replace(current, not_before=again, claimed_until=None, pushed_at=None, last_error=error)
            await uow.outbox.save(retry)
            uow.notify(outbox_key(item.tenant_id))  # the worker looks again when the retry is due
            stats.retried += 1
            return
        await uow.outbox.save(_finished(current, OutboxStatus.FAILED, now, error))
        device = await uow.devices.by_uid(item.device_uid)
        await _journal(uow, "push.failed", "failed", current, device, now, failure)
        stats.failed += 1
        if isinstance(failure, SubscriptionGone) and device is not None:
            await _drop_target(uow, device, out.message, item, now)


def _retry(ctx: Context, item: OutboxItem, failure: PushFailed, now: datetime) -> datetime | None:
    if not failure.retryable:
        return None
    return retry_at(item.attempts, ctx.limits.push_retry_seconds, now)


async def _drop_target(
    uow: UnitOfWork, device: Device, message: PushMessage, item: OutboxItem, now: datetime
) -> None:
    """The push service says the address is dead: forget it, unless the device has a new one since."""
    if device.push != message.target:
        return
    await uow.devices.set_push(device.device_uid, None)
    await uow.journal.append(
        AuditRecord(
            "device.push_removed",
            ACTOR,
            subject=device.device_id,
            reason="the push service said the device's push address is gone",
            data={
                "user_id": device.user_id,
                "device_uid": device.device_uid,
                "kind": message.target.kind,
                "delivery_id": item.delivery_id,
            },
        ),
        now,
    )


def _finished(item: OutboxItem, status: OutboxStatus, now: datetime, error: str | None = None) -> OutboxItem:
    return replace(item, status=status, finished_at=now, claimed_until=None, last_error=error)


async def _journal(
    uow: UnitOfWork,
    action: str,
    outcome: str,
    item: OutboxItem,
    device: Device | None,
    now: datetime,
    failure: PushFailed | None = None,
) -> None:
    """Ids, counts and the error's code: never the push's words or the service's address."""
    data: dict[str, str | int | bool | None] = {
        "delivery_id": item.delivery_id,
        "event": item.event,
        "user_id": item.user_id,
        "device_id": device.device_id if device else None,
        "attempts": item.attempts,
    }
    if failure is not None:
        data |= {"error": failure.code, "retryable": failure.retryable}
    await uow.journal.append(AuditRecord(action, ACTOR, outcome, subject=item.subject_id, data=data), now)
