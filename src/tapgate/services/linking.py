"""A device's live link (DESIGN §3.4, §18): the frames it receives, and what becomes of the ones it sends.

``frames`` yields, for as long as the link lives: every pending call as ``device:invoke`` and every open
approval of the person as ``device:approval`` at once, then each new one the moment it is written (in any
process), never the same one twice on one link; ``device:revoked`` (and the end) when the device is
removed. It revalidates the device on every wake (new work, the person's inbox, its tenant's
credentials) and never on a timer; its presence is held with every other link of the process in batches
(``services/links.py``), so the agent reads ``device.online`` and ``device.offline``. ``acknowledge``
answers a ``device:result`` with its ``device:ack``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from tapgate.domain.errors import Conflict, Gone, InvalidInput, NotFound, TapgateError
from tapgate.domain.frames import REVOKED_FRAME, Ack, DeviceResult, ack_frame, approval_frame, invoke_frame
from tapgate.services import answering, devices
from tapgate.services.answering import AlreadyAnswered
from tapgate.services.context import Context, device_key, inbox_key, wait_slice
from tapgate.services.devices import DeviceCaller
from tapgate.services.links import LiveLinks

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
        with (
            ctx.wake.subscribe(device_key(tenant, uid)) as work,
            ctx.wake.subscribe(inbox_key(tenant, user)) as asks,
            links.holding(tenant, uid, work),
        ):
            calls: set[str] = set()
            approvals: set[str] = set()
            look_at_approvals = True
            while True:
                work_woke = work.is_set()
                work.clear()
                asks.clear()
                try:
                    caller = await revalidate()
                except TapgateError:
                    yield REVOKED_FRAME
                    return
                if work_woke or not calls or ctx.wake.degraded or look_at_approvals:
                    pending = await answering.take_pending(ctx, caller)
                    for invocation in pending:
                        if invocation.invocation_id not in calls:
                            yield invoke_frame(invocation)
                    calls = {i.invocation_id for i in pending}
                    links.note_sent(tenant, uid, calls)
                if look_at_approvals:
                    now = ctx.clock.now()
                    async with ctx.store.unit_of_work(tenant) as uow:
                        open_ = [a for a in await uow.approvals.pending_for(user) if a.expires_at > now]
                    for approval in open_:
                        if approval.approval_id not in approvals:
                            yield approval_frame(approval)
                    approvals = {a.approval_id for a in open_}
                # Idle until woken; only while notifications may be missed does the link poll.
                poll = wait_slice(ctx, links.hold_seconds) if ctx.wake.degraded else None
                await _either(work, asks, poll)
                look_at_approvals = asks.is_set() or ctx.wake.degraded
    finally:
        with contextlib.suppress(TapgateError):
            await devices.close_link(ctx.store, ctx.clock, caller)


async def _either(first: asyncio.Event, second: asyncio.Event, seconds: float | None) -> bool:
    """Wait until either event is set, or ``seconds`` (None: no limit); True if one was set."""
    waits = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    return bool(done)


async def acknowledge(ctx: Context, caller: DeviceCaller, frame: DeviceResult) -> dict[str, Any]:
    """Take a ``device:result`` as the HTTP answer would, and say what became of it (``device:ack``)."""
    try:
        answered = await answering.answer(ctx, caller, frame.call_id, frame.status, frame.message)
    except AlreadyAnswered as e:
        return ack_frame(frame.call_id, Ack.DUPLICATE, e.message, first=e.first.status.value)
    except Gone as e:
        return ack_frame(frame.call_id, Ack.EXPIRED, e.message)
    except NotFound as e:
        return ack_frame(frame.call_id, Ack.UNKNOWN, e.message)
    except (InvalidInput, Conflict) as e:
        return ack_frame(frame.call_id, Ack.INVALID, e.message)
    return ack_frame(answered.invocation_id, Ack.ACCEPTED)
