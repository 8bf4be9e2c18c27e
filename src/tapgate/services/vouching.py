"""Vouching: a new pairing of a user who has an approver (a device that approves for them)
waits for one of their approvers to sign a ``device_pair`` approval; every completed pairing is announced
to the user's approvers."""

from __future__ import annotations

from datetime import datetime

from tapgate.domain.approvals import action_sha256, new_sign_block
from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import Device
from tapgate.domain.events import APPROVAL_REQUESTED
from tapgate.domain.ids import new_id
from tapgate.domain.inbox import Approval, ApprovalStatus, binding_code
from tapgate.domain.pairing import Pairing
from tapgate.domain.push import DEVICE_PAIRED
from tapgate.domain.vouching import DEVICE_PAIR, pairing_arguments, pairing_preview, pairing_prompt
from tapgate.ports import UnitOfWork
from tapgate.services.context import inbox_key
from tapgate.services.outbox import queue_push


async def vouchers(uow: UnitOfWork, user_id: str, new_device_uid: str) -> list[Device]:
    """The user's approvers other than the new device: those that can vouch for it (a lamp never does)."""
    return [d for d in await uow.devices.list(user_id) if d.approver and d.device_uid != new_device_uid]


async def open_pair_approval(
    uow: UnitOfWork, pairing: Pairing, device: Device, approvers: list[Device], now: datetime
) -> Approval:
    """The ``device_pair`` approval on the user's devices, open while the pairing waits for consent."""
    assert pairing.comparison_code is not None
    arguments = pairing_arguments(device, pairing.comparison_code) | {"pairing_id": pairing.pairing_id}
    preview = pairing_preview(arguments)
    planned = action_sha256(DEVICE_PAIR, device.device_id, DEVICE_PAIR, arguments, preview)
    window = max(1, int((pairing.expires_at - now).total_seconds()))
    approval = Approval(
        tenant_id=pairing.tenant_id,
        approval_id=new_id("apr"),
        user_id=pairing.user_id,
        agent_id="",
        invocation_id=None,
        kind=DEVICE_PAIR,
        subject=device.device_id,
        prompt=pairing_prompt(device),
        preview=preview,
        sign=new_sign_block(planned, now, window),
        binding_code=binding_code(),
        status=ApprovalStatus.PENDING,
        created_at=now,
        expires_at=pairing.expires_at,
        tool=DEVICE_PAIR,
        arguments=arguments,
    )
    await uow.approvals.add(approval)
    for approver in approvers:
        await queue_push(uow, approver, APPROVAL_REQUESTED, approval.approval_id, now)
    await uow.journal.append(
        AuditRecord(
            "pairing.vouch_requested",
            "system:pairing",
            "awaiting_approval",
            subject=pairing.pairing_id,
            data={"device_id": device.device_id, "approval_id": approval.approval_id},
        ),
        now,
    )
    uow.notify(inbox_key(approval.tenant_id, approval.user_id))
    return approval


async def close_pair_approvals(
    uow: UnitOfWork, user_id: str, device_id: str, status: ApprovalStatus, by: str, now: datetime
) -> None:
    """Close the ``device_pair`` approvals still open for this device, on every device at once."""
    for approval in await uow.approvals.pending_for(user_id):
        if approval.kind == DEVICE_PAIR and approval.subject == device_id:
            await uow.approvals.decide(approval.decided(status, by, now))
            uow.notify(inbox_key(approval.tenant_id, user_id))


async def announce_paired(uow: UnitOfWork, device: Device, now: datetime) -> None:
    """A content-free notice to each of the user's approvers (but the new device): a new device was
    paired."""
    for other in await vouchers(uow, device.user_id, device.device_uid):
        await queue_push(uow, other, DEVICE_PAIRED, device.device_id, now)
