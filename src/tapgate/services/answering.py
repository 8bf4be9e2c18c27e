"""The device's side of an invocation: fetch what is pending, and answer each exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta

from tapgate import faults
from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import AlreadyAnswered, Gone, NotFound
from tapgate.domain.events import INVOCATION_LATE_REPORT
from tapgate.domain.invocations import MAX_POLL_SECONDS, Invocation, Status, cut_message, device_status
from tapgate.flag import Flag
from tapgate.ports import UnitOfWork
from tapgate.services.context import Context, device_key, events_key, invocation_key
from tapgate.services.devices import DeviceCaller
from tapgate.services.endings import announce, device_online
from tapgate.services.handed import HandedCalls
from tapgate.services.waiting import Deadline, sleep_until_woken

MAX_FETCH = 50


@dataclass(frozen=True, slots=True)
class Answered:
    invocation_id: str
    status: Status


async def pending(
    ctx: Context,
    caller: DeviceCaller,
    hands: HandedCalls,
    wait: float = 0,
    held: Collection[str] = frozenset(),
) -> Sequence[Invocation]:
    """The long-poll: the device's pending invocations it does not hold, waiting up to ``wait`` seconds
    for one. A call handed to the device is handed again only ``redelivery_seconds`` later, so a device
    that holds its work waits here instead of spinning (``hands`` remembers when); ``held`` are calls a
    live link of this process holds for the device (handed over there, with no mark written).

    It reads when it begins, and again whenever it is woken, except where only new calls written in this
    process woke it (``invoking.deliver`` hands them with the wake) and the device has no push target:
    those are answered as written, without a read, as a live link sends them (``linking.py``). Anything
    else that wakes it (another process's notification, a sweep, a held call's time) makes it read."""
    deadline = Deadline(wait, MAX_POLL_SECONDS)
    tenant, uid = caller.principal.tenant_id, caller.device.device_uid
    awake = Flag()  # set with ``woken``, which then keeps what was handed with its wakes
    handed: list[Invocation] | None = None
    held_until: datetime | None = None
    with ctx.wake.subscribe(device_key(tenant, uid), also=awake) as woken:
        while True:
            woken.clear()
            awake.clear()
            if handed is None:
                found, held_until = await _take(ctx, caller, hands, skip=held)
            else:
                found = _take_handed(ctx, caller, hands, handed, skip=held)
            left = deadline.left()
            if found or left <= 0:
                return found
            if held_until is not None:  # wake when the first held call may be handed again
                left = min(left, max(0.0, (held_until - ctx.clock.now()).total_seconds()) + 0.01)
            await sleep_until_woken(ctx, awake, left)
            handed = None
            if woken.is_set() and caller.device.push is None and not ctx.wake.degraded:
                handed = new_calls(ctx.wake.handed(woken))


def new_calls(handed: list[object] | None) -> list[Invocation] | None:
    """The new calls handed with a device's wakes (``invoking.deliver``), or None: read instead."""
    if handed is None or not all(isinstance(i, Invocation) for i in handed):
        return None
    return [i for i in handed if isinstance(i, Invocation)]


def _take_handed(
    ctx: Context, caller: DeviceCaller, hands: HandedCalls, calls: list[Invocation], skip: Collection[str]
) -> list[Invocation]:
    """``_take`` for calls handed with the wake, as written: the same filters, no read; their marks go
    in ``hands``' next batch (the device has no push target)."""
    now = ctx.clock.now()
    tenant = caller.principal.tenant_id
    found = [
        i
        for i in calls
        if not i.due(now)
        and i.invocation_id not in skip
        and hands.handed_at(tenant, i.invocation_id, i.delivered_at) is None
    ][:MAX_FETCH]
    if found:
        hands.note(
            tenant, caller.device.user_id, caller.device.device_uid, [i.invocation_id for i in found], now
        )
    return found


def fetching(ctx: Context, caller: DeviceCaller) -> AbstractAsyncContextManager[UnitOfWork]:
    """The unit of work a fetch of pending calls runs in: one that only reads, unless the device has a
    push target (its fetch marks what it took)."""
    tenant = caller.principal.tenant_id
    return ctx.store.unit_of_work(tenant) if caller.device.push is not None else ctx.store.reading(tenant)


async def take_pending(uow: UnitOfWork, caller: DeviceCaller, now: datetime) -> list[Invocation]:
    """Every pending invocation not yet overdue, held or not (what a live link sends; the link itself
    remembers what it sent), read in the link's unit of work. A device with a push target has them
    marked as handed over (so its push for them is withheld); for any other device the fetch writes
    nothing, since nothing reads the mark but the push worker."""
    found = [
        i for i in await uow.invocations.pending_for(caller.device.device_uid, MAX_FETCH) if not i.due(now)
    ]
    fresh = [i.invocation_id for i in found if i.delivered_at is None]
    if fresh and caller.device.push is not None:
        await uow.invocations.mark_delivered(caller.device.user_id, caller.device.device_uid, fresh, now)
    return found


async def _take(
    ctx: Context, caller: DeviceCaller, hands: HandedCalls, skip: Collection[str] = frozenset()
) -> tuple[list[Invocation], datetime | None]:
    """The pending calls to hand over now, and when the first one held back may be handed again. Only a
    device with a push target has them marked in the fetch's own transaction (its mark withholds the
    push); for any other the fetch writes nothing and ``hands`` writes the marks in a later batch."""
    now = ctx.clock.now()
    again = timedelta(seconds=ctx.limits.redelivery_seconds)
    found: list[Invocation] = []
    held_until: datetime | None = None
    tenant, user, uid = caller.principal.tenant_id, caller.device.user_id, caller.device.device_uid
    async with fetching(ctx, caller) as uow:
        for invocation in await uow.invocations.pending_for(uid, MAX_FETCH):
            if invocation.due(now) or invocation.invocation_id in skip:
                continue
            handed = hands.handed_at(tenant, invocation.invocation_id, invocation.delivered_at)
            if handed is not None and handed + again > now:
                until = handed + again
                held_until = until if held_until is None else min(held_until, until)
                continue
            found.append(invocation)
        if found and caller.device.push is not None:
            await uow.invocations.mark_delivered(user, uid, [i.invocation_id for i in found], now)
    if found and caller.device.push is None:
        hands.note(tenant, user, uid, [i.invocation_id for i in found], now)
    return found, held_until


async def answer(
    ctx: Context,
    caller: DeviceCaller,
    invocation_id: str,
    status_word: str,
    message: str | None,
    linked: bool = False,
) -> Answered:
    """The device's one answer. Raises NotFound (not this device's), AlreadyAnswered (409), Gone (410:
    it expired; the answer is kept as a late report), InvalidInput (a bad status). ``linked``: it came
    over the device's live link, so the device is online (``device_online``) without reading it."""
    status = device_status(status_word)
    now = ctx.clock.now()
    handed: tuple[str, Invocation, bool | None] | None = None  # for a call waiting in this process
    tenant, user, uid = caller.principal.tenant_id, caller.device.user_id, caller.device.device_uid
    key = invocation_key(tenant, user, invocation_id)
    reads_presence = not linked and ctx.handover.wanted(key)  # the waiting call's view needs it
    said = cut_message(message)
    async with ctx.store.unit_of_work(tenant) as uow:
        online: bool | None = True if linked else None
        if reads_presence:  # with the answer, in its one statement
            taken = await uow.invocations.answer_with_presence(user, invocation_id, uid, status, said, now)
            answered, presence = taken if taken is not None else (None, None)
            online = None if presence is None else presence.online(now)
        else:
            answered = await uow.invocations.answer(user, invocation_id, uid, status, said, now)
        if answered is None:  # not this device's pending call before its deadline: read it to say why
            await _not_taken(uow, caller, invocation_id, status, message, now)  # or raises
        else:
            await announce(uow, answered, "invocation.answered", caller.principal.actor, now)
            if ctx.handover.wanted(key):  # a call in this process waits: it takes the answer from here
                if not (linked or reads_presence):  # it came to wait since the answer's statement
                    online = await device_online(uow, answered, now)
                handed = key, answered, online
    if handed is not None:
        ctx.handover.hand(*handed)
        # The waiting call, woken by the commit, answers its agent before this answers the device: the
        # device's receipt can wait one turn of the loop, the agent's answer is the call's round trip.
        await asyncio.sleep(0)
    faults.crash_point("answer.after_commit")
    if answered is None:
        raise Gone("This invocation expired before the answer came; it is kept as a late report.")
    return Answered(invocation_id, status)


async def _not_taken(
    uow: UnitOfWork,
    caller: DeviceCaller,
    invocation_id: str,
    status: Status,
    message: str | None,
    now: datetime,
) -> None:
    """An answer ``Invocations.answer`` did not take: kept as a late report if the call expired (then this
    returns); otherwise raises NotFound (not this device's, or not yet approved) or AlreadyAnswered."""
    invocation = await uow.invocations.get(caller.device.user_id, invocation_id)
    if (
        invocation is None
        or invocation.device_uid != caller.device.device_uid
        or invocation.status is Status.AWAITING_APPROVAL  # not handed to the device until approved
    ):
        raise NotFound(f"This device has no invocation {invocation_id!r}.")
    if invocation.due(now):
        expired = invocation.expired(now)
        if await uow.invocations.resolve(expired):
            await announce(uow, expired, "invocation.expired", "system:expiry", now)
        invocation = expired
    if invocation.status is not Status.EXPIRED:  # an open one, this device's and not due, it would have taken
        raise AlreadyAnswered(invocation)
    await _late_report(uow, caller, invocation, status, message)


async def _late_report(
    uow: UnitOfWork, caller: DeviceCaller, invocation: Invocation, status: Status, message: str | None
) -> None:
    now = invocation.resolved_at or invocation.expires_at
    if not await uow.invocations.add_late_report(
        invocation.user_id, invocation.invocation_id, status.value, cut_message(message), now
    ):
        return
    await uow.journal.append(
        AuditRecord(
            "invocation.late_report",
            caller.principal.actor,
            status.value,
            subject=invocation.invocation_id,
            data={"tool": invocation.tool, "device_id": invocation.device_id},
        ),
        now,
    )
    await uow.events.append(
        invocation.user_id,
        INVOCATION_LATE_REPORT,
        {"invocation_id": invocation.invocation_id, "tool": invocation.tool, "status": status.value},
        now,
    )
    uow.notify(events_key(invocation.tenant_id, invocation.user_id))
