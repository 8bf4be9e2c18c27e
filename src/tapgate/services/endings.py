"""A call reaches its end: resolved once, journalled, announced on the person's event stream and woken;
an overdue call expires; a removed device's open calls fail; the approval a call waited on closes; a pause
refuses the person's calls not yet handed to a device."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import Device
from tapgate.domain.events import INVOCATION_RESOLVED
from tapgate.domain.inbox import ApprovalStatus
from tapgate.domain.invocations import Invocation, Status
from tapgate.ports import UnitOfWork
from tapgate.services.context import Context, device_key, events_key, inbox_key, invocation_key


async def expire(ctx: Context, invocation: Invocation, now: datetime) -> Invocation:
    """Resolve an overdue invocation ``expired`` (tool.device_offline), unless an answer won first."""
    async with ctx.store.unit_of_work(invocation.tenant_id) as uow:
        expired = invocation.expired(now)
        if await uow.invocations.resolve(expired):
            await announce(uow, expired, "invocation.expired", "system:expiry", now)
            await close_approval(uow, expired, ApprovalStatus.EXPIRED, "system:expiry", now)
            # The device's links read again: a link reads a page of pending calls (the oldest), and one
            # past it is sent once the page has room; nothing else would wake an idle link for it.
            uow.notify(device_key(expired.tenant_id, expired.device_uid))
            return expired
        current = await uow.invocations.get(invocation.user_id, invocation.invocation_id)
    assert current is not None
    return current


async def device_online(uow: UnitOfWork, invocation: Invocation, now: datetime) -> bool | None:
    """Whether the invocation's device has a live link or a push route now (the view's ``device_online``);
    None if the device is gone."""
    presence = await uow.devices.presence(invocation.device_uid)
    return None if presence is None else presence.online(now)


async def announce(uow: UnitOfWork, invocation: Invocation, action: str, actor: str, now: datetime) -> None:
    """Journal, emit and wake for an invocation that just reached its end."""
    await uow.journal.append(
        AuditRecord(
            action,
            actor,
            invocation.status.value,
            subject=invocation.invocation_id,
            data={
                "user_id": invocation.user_id,
                "tool": invocation.tool,
                "device_id": invocation.device_id,
                "capability": invocation.capability,
            },
        ),
        now,
    )
    await uow.events.append(
        invocation.user_id,
        INVOCATION_RESOLVED,
        {
            "invocation_id": invocation.invocation_id,
            "tool": invocation.tool,
            "status": invocation.status.value,
        },
        now,
    )
    uow.notify(invocation_key(invocation.tenant_id, invocation.user_id, invocation.invocation_id))
    uow.notify(events_key(invocation.tenant_id, invocation.user_id))


async def fail_open(uow: UnitOfWork, device_uid: str, actor: str, now: datetime) -> None:
    """A revoked device's open invocations resolve ``failed`` at once, and its links are woken."""
    for invocation in await uow.invocations.open_for(device_uid):
        # The device said nothing: the server's reason goes in ``reason``, never in the device's message.
        failed = replace(
            invocation.answered(Status.FAILED, None, now),
            reason="[deny] the device was removed before it answered",
        )
        if await uow.invocations.resolve(failed):
            await announce(uow, failed, "invocation.failed", actor, now)
    uow.notify(device_key(uow.tenant_id, device_uid))


async def close_approval(
    uow: UnitOfWork, invocation: Invocation, status: ApprovalStatus, by: str, now: datetime
) -> None:
    """Close the approval a call was waiting on, on every device at once."""
    if invocation.approval_id is None:
        return
    approval = await uow.approvals.get(invocation.approval_id)
    if approval is None or approval.status is not ApprovalStatus.PENDING:
        return
    await uow.approvals.decide(approval.decided(status, by, now))
    uow.notify(inbox_key(invocation.tenant_id, invocation.user_id))


async def refuse_unhanded(uow: UnitOfWork, user_id: str, reason: str, actor: str, now: datetime) -> int:
    """Refuse the person's calls not yet handed to a device, and close the approvals they waited on, on
    every device; return how many. A call waits for its approval, or is pending with no hand-over mark on
    a device with no live link (a live link sends a call the moment it is written). A call handed over is
    left to its device, which may be doing it already."""
    waiting: list[tuple[Invocation, Device]] = []
    unhanded: list[Invocation] = []
    for device in await uow.devices.list(user_id):
        for invocation in await uow.invocations.open_for(device.device_uid):
            if invocation.status is Status.AWAITING_APPROVAL:
                waiting.append((invocation, device))
            elif not _handed(invocation, device, now):
                unhanded.append(invocation)
    # Every approval closes before any other write: a decision takes its approval first, then the
    # journal, then its call, so a decision racing the pause waits for it (or it for the decision).
    for invocation, device in waiting:
        current = await _close_for_pause(uow, invocation, now)
        if current is not None and (
            current.status is Status.AWAITING_APPROVAL or not _handed(current, device, now)
        ):
            unhanded.append(current)
    refused = 0
    for invocation in unhanded:
        ended = invocation.refused(reason, now)
        if await uow.invocations.resolve(ended):
            await announce(uow, ended, "invocation.refused", actor, now)
            refused += 1
    if waiting:
        uow.notify(inbox_key(uow.tenant_id, user_id))
    return refused


def _handed(invocation: Invocation, device: Device, now: datetime) -> bool:
    return invocation.delivered_at is not None or device.live(now)


async def _close_for_pause(uow: UnitOfWork, invocation: Invocation, now: datetime) -> Invocation | None:
    """Close the approval a waiting call needs; the call as it stands then, None if it has ended. A yes
    that came first has moved the call on to its device, where it may not have been taken yet."""
    approval = await uow.approvals.get(invocation.approval_id) if invocation.approval_id else None
    if approval is not None and approval.status is ApprovalStatus.PENDING:
        closed = approval.decided(ApprovalStatus.DENIED, "paused by the person", now)
        if await uow.approvals.decide(closed):
            return invocation
    current = await uow.invocations.get(invocation.user_id, invocation.invocation_id)
    return current if current is not None and current.status.open else None
