"""A device's live link: the frames it receives, and what becomes of the ones it sends.

``frames`` yields, for as long as the link lives: every pending call as ``device:invoke``, every open
approval of the person as ``device:approval`` and every notice waiting for the device as
``device:notice`` at once, then each new one the moment it is written (in any process), never the same
one twice on one link; ``device:revoked`` (and the end) when the device is removed or its token is
revoked (in any process) or expires. A call written in this process comes with its wake, as written, and
is sent without a read when nothing else woke the link. A notice sent marks its outbox row ``linked``: no
push follows, and no later link sends it again. It revalidates the device on every wake (new work, the
person's inbox or notices, its tenant's credentials) and at its token's expiry, never on a timer; its
presence is held with every other link of the process in batches (``services/links.py``), so the agent
reads ``device.online`` and ``device.offline``. ``acknowledge`` answers a ``device:result`` with its
``device:ack``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from tapgate.domain.errors import (
    AlreadyAnswered,
    Conflict,
    Gone,
    InvalidInput,
    NotFound,
    StorageError,
    TapgateError,
)
from tapgate.domain.frames import (
    REVOKED_FRAME,
    Ack,
    DeviceResult,
    ack_frame,
    approval_frame,
    invoke_frame,
    notice_frame,
)
from tapgate.domain.inbox import Approval, answers
from tapgate.flag import Flag
from tapgate.ports import UnitOfWork
from tapgate.services import answering, devices
from tapgate.services.context import Context, device_key, inbox_key, notices_key
from tapgate.services.devices import DeviceCaller
from tapgate.services.links import LiveLinks
from tapgate.services.waiting import sleep_until_woken, wait_slice

log = logging.getLogger(__name__)
_marking: set[asyncio.Future[None]] = set()  # notice marks still being written
NONE: frozenset[str] = frozenset()  # shared: Python 3.11 makes a new empty one (216 bytes) each time
Revalidate = Callable[[], Awaitable[DeviceCaller]]


async def frames(
    ctx: Context, caller: DeviceCaller, revalidate: Revalidate, links: LiveLinks
) -> AsyncGenerator[dict[str, Any], None]:
    """The frames for one live link; see the module docstring. ``revalidate`` reads the device again
    (raising TapgateError once it is removed). ``links`` renews the link's hold with every other link
    of the process, and wakes it when its tenant's credentials change: an idle link costs the database
    nothing."""
    tenant, uid = caller.principal.tenant_id, caller.device.device_uid
    assert caller.principal.user_id is not None
    user = caller.principal.user_id
    await devices.open_link(ctx.store, ctx.clock, caller, links.hold_seconds)
    try:
        woken = Flag()  # set with any of the three: an idle link waits on it alone, with no task
        with (
            # Unswept: a link re-reads when woken, never on a sweep's timer (a call it misses is pushed).
            ctx.wake.subscribe(device_key(tenant, uid), swept=False, also=woken) as work,
            ctx.wake.subscribe(inbox_key(tenant, user), swept=False, also=woken) as asks,
            ctx.wake.subscribe(notices_key(tenant, user), swept=False, also=woken) as news,
            links.holding(tenant, uid, work),
        ):
            calls = approvals = noticed = NONE  # what an idle link holds: mostly nothing, shared
            look_at_approvals = look_at_notices = True
            while True:
                work_woke = work.is_set()
                handed = answering.new_calls(ctx.wake.handed(work)) if work_woke else None
                woken.clear()
                work.clear()
                asks.clear()
                news.clear()
                try:
                    caller = await revalidate()
                except StorageError:
                    # The database is away, which says nothing of the device: keep the link, and read
                    # everything again on the poll interval (or at the next wake).
                    look_at_approvals = look_at_notices = True
                    await sleep_until_woken(ctx, woken, ctx.limits.invocation_poll_seconds)
                    continue
                except TapgateError:
                    yield REVOKED_FRAME
                    return
                now = ctx.clock.now()
                pending = open_ = unsent = None
                if (
                    handed is not None
                    and not (look_at_approvals or look_at_notices or ctx.wake.degraded)
                    and len(calls) + len(handed) < answering.MAX_FETCH
                ):
                    # Only new calls written in this process woke it: sent as written, without a read.
                    # ``calls`` keeps the answered ones until the next read, at most a page of them.
                    new = [i for i in handed if i.invocation_id not in calls and not i.due(now)]
                    calls = _ids(calls | {i.invocation_id for i in new})
                    links.note_sent(tenant, uid, calls)
                    for invocation in new:
                        yield invoke_frame(invocation)
                else:
                    look_at_calls = work_woke or not calls or ctx.wake.degraded or look_at_approvals
                    # What the wake asks for is read in one unit of work, then sent outside it.
                    since = now - timedelta(seconds=ctx.limits.notice_life_seconds)
                    async with (
                        answering.fetching(ctx, caller)
                        if not (look_at_approvals or look_at_notices)
                        else ctx.store.unit_of_work(tenant)
                    ) as uow:
                        if look_at_calls:
                            pending = await answering.take_pending(uow, caller, now)
                        if look_at_approvals:
                            open_ = await _answerable(uow, uid, user, now)
                        if look_at_notices:
                            unsent = await uow.outbox.notices_for(uid, since)
                if pending is not None:
                    fresh = [i for i in pending if i.invocation_id not in calls]
                    calls = _ids(i.invocation_id for i in pending)
                    # Noted before they go: an answer to the first may come before the last is sent.
                    links.note_sent(tenant, uid, calls, full=len(pending) >= answering.MAX_FETCH)
                    for invocation in fresh:
                        yield invoke_frame(invocation)
                if open_ is not None:
                    for approval in open_:
                        if approval.approval_id not in approvals:
                            yield approval_frame(approval)
                    approvals = _ids(a.approval_id for a in open_)
                if unsent is not None:
                    # The rest were marked: never read again.
                    noticed = _ids(noticed & {n.delivery_id for n in unsent})
                    waiting = [n for n in unsent if n.delivery_id not in noticed]
                    try:
                        for notice in waiting:
                            yield notice_frame(notice)
                            noticed |= {notice.delivery_id}
                    finally:  # sent: no push follows, and no later link sends them again
                        await _linked(
                            ctx, tenant, [n.delivery_id for n in waiting if n.delivery_id in noticed]
                        )
                # Idle until woken, or until the token expires (then revalidating ends the link); only
                # while notifications may be missed does the link poll.
                poll = wait_slice(ctx, links.hold_seconds) if ctx.wake.degraded else None
                limit = _sooner(poll, caller.principal.expires_at, now)
                await sleep_until_woken(ctx, woken, limit)  # no frame of its own
                look_at_approvals = asks.is_set() or ctx.wake.degraded
                look_at_notices = news.is_set() or ctx.wake.degraded
    finally:
        with contextlib.suppress(TapgateError):
            await devices.close_link(ctx.store, ctx.clock, caller)


async def _answerable(uow: UnitOfWork, uid: str, user: str, now: datetime) -> list[Approval]:
    """The person's open approvals this device may answer, by the device as stored now: what it may
    answer follows its grants at once. A function of its own, so that the device it reads is not held in
    the link's frame while the link waits (an idle link holds it for hours)."""
    me = await uow.devices.by_uid(uid)
    if me is None:
        return []
    return [a for a in await uow.approvals.pending_for(user) if a.expires_at > now and answers(me, a)]


def _ids(ids: Iterable[str]) -> frozenset[str]:
    """``ids`` as a frozen set, the shared ``NONE`` when there are none (a link holds three for hours)."""
    return frozenset(ids) or NONE


async def _linked(ctx: Context, tenant_id: str, delivery_ids: list[str]) -> None:
    """Mark the notices the link sent; the write finishes even when the link closes meanwhile. Should it
    fail, a notice is sent again by the next link (or pushed): at least once, never lost."""
    if not delivery_ids:
        return

    async def write() -> None:
        async with ctx.store.unit_of_work(tenant_id) as uow:
            await uow.outbox.linked(delivery_ids, ctx.clock.now())

    task = asyncio.ensure_future(write())
    _marking.add(task)  # held here until done: a link that closes meanwhile does not drop the write
    task.add_done_callback(_marked)
    with contextlib.suppress(TapgateError):
        await asyncio.shield(task)


def _marked(task: asyncio.Future[None]) -> None:
    _marking.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("notice mark failed", extra={"error": type(task.exception()).__name__})


def _sooner(seconds: float | None, expires_at: datetime | None, now: datetime) -> float | None:
    """``seconds``, or the time left until ``expires_at`` if that comes first (None: neither)."""
    if expires_at is None:
        return seconds
    left = max(0.0, (expires_at - now).total_seconds())
    return left if seconds is None else min(seconds, left)


async def acknowledge(
    ctx: Context, caller: DeviceCaller, frame: DeviceResult, links: LiveLinks
) -> dict[str, Any]:
    """Take a ``device:result`` as the HTTP answer would, and say what became of it (``device:ack``).
    A link that holds a whole page of calls reads again after it (``LiveLinks.answered``)."""
    try:
        return await _acknowledge(ctx, caller, frame)
    finally:
        links.answered(caller.principal.tenant_id, caller.device.device_uid)


async def _acknowledge(ctx: Context, caller: DeviceCaller, frame: DeviceResult) -> dict[str, Any]:
    try:
        answered = await answering.answer(
            ctx, caller, frame.call_id, frame.status, frame.message, linked=True
        )
    except AlreadyAnswered as e:
        return ack_frame(frame.call_id, Ack.DUPLICATE, e.message, first=e.first.status.value)
    except Gone as e:
        return ack_frame(frame.call_id, Ack.EXPIRED, e.message)
    except NotFound as e:
        return ack_frame(frame.call_id, Ack.UNKNOWN, e.message)
    except (InvalidInput, Conflict) as e:
        return ack_frame(frame.call_id, Ack.INVALID, e.message)
    return ack_frame(answered.invocation_id, Ack.ACCEPTED)
