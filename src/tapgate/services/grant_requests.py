"""A device asks the person for a grant: a capability it re-declared with ``granted: true`` becomes a
``grant`` approval on the person's approvers, and nothing is granted until one of them signs it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from tapgate.domain.approvals import action_sha256, new_sign_block
from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import Capability, Declared, Device
from tapgate.domain.errors import TooLongToShow
from tapgate.domain.events import APPROVAL_REQUESTED
from tapgate.domain.grant_requests import GRANT, grant_arguments, grant_preview, grant_prompt
from tapgate.domain.ids import new_id
from tapgate.domain.inbox import Approval, ApprovalStatus, binding_code
from tapgate.ports import UnitOfWork
from tapgate.services.context import inbox_key
from tapgate.services.outbox import queue_push


def _asked_for(approval: Approval) -> dict[str, object]:
    assert approval.arguments is not None
    entry = approval.arguments["capability"]
    assert isinstance(entry, dict)
    return entry


async def ask_for_grants(
    uow: UnitOfWork,
    device: Device,
    merged: Sequence[Declared],
    wanted: Sequence[Capability],
    window: int,
    now: datetime,
) -> list[str]:
    """Open a ``grant`` approval for each capability in ``wanted`` (self-marked, not granted) on the
    person's approvers, and close the device's open requests that ``merged`` (its manifest now) made
    moot. Returns the names that wait for the person; none when the person has no approver."""
    current = {d.capability.name: d for d in merged}
    open_ = {}
    for approval in await uow.approvals.pending_for(device.user_id):
        if (
            approval.kind != GRANT
            or approval.invocation_id is not None
            or approval.subject != device.device_id
        ):
            continue
        entry = _asked_for(approval)
        now_declared = current.get(str(entry["name"]))
        moot = now_declared is None or now_declared.granted or now_declared.capability.as_dict() != entry
        if moot or approval.expires_at <= now:  # an ended request is asked again
            await uow.approvals.decide(approval.decided(ApprovalStatus.EXPIRED, "system:redeclared", now))
            uow.notify(inbox_key(approval.tenant_id, approval.user_id))
        else:
            open_[str(entry["name"])] = approval
    approvers = [d for d in await uow.devices.list(device.user_id) if d.approver]
    if not approvers:
        return []
    waiting = []
    for capability in wanted:
        if capability.name not in open_:
            try:
                await _open(uow, device, capability, approvers, window, now)
            except TooLongToShow:
                continue  # a bar too long to show on a card is granted in the console
        waiting.append(capability.name)
    return waiting


async def _open(
    uow: UnitOfWork,
    device: Device,
    capability: Capability,
    approvers: list[Device],
    window: int,
    now: datetime,
) -> Approval:
    arguments = grant_arguments(device, capability)
    preview = grant_preview(arguments)
    planned = action_sha256(GRANT, device.device_id, GRANT, arguments, preview)
    approval = Approval(
        tenant_id=device.tenant_id,
        approval_id=new_id("apr"),
        user_id=device.user_id,
        agent_id="",
        invocation_id=None,
        kind=GRANT,
        subject=device.device_id,
        prompt=grant_prompt(device, capability),
        preview=preview,
        sign=new_sign_block(planned, now, window),
        binding_code=binding_code(),
        status=ApprovalStatus.PENDING,
        created_at=now,
        expires_at=now + timedelta(seconds=window),
        tool=GRANT,
        arguments=arguments,
    )
    await uow.approvals.add(approval)
    for approver in approvers:
        await queue_push(uow, approver, APPROVAL_REQUESTED, approval.approval_id, now)
    await uow.journal.append(
        AuditRecord(
            "device.grant_requested",
            f"device:{device.user_id}/{device.device_id}",
            "awaiting_approval",
            subject=device.device_id,
            data={
                "user_id": device.user_id,
                "capability": capability.name,
                "approval_id": approval.approval_id,
            },
        ),
        now,
    )
    uow.notify(inbox_key(approval.tenant_id, approval.user_id))
    return approval
