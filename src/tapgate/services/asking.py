"""A call that needs the person: its approval is written beside the waiting call, pushed to every device
that can sign it, journalled and announced."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tapgate.domain.approvals import action_sha256, new_sign_block
from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import Capability, Device
from tapgate.domain.events import APPROVAL_REQUESTED
from tapgate.domain.ids import new_id
from tapgate.domain.inbox import (
    Approval,
    ApprovalStatus,
    binding_code,
    prompt_for,
    render_preview,
    who_asks,
)
from tapgate.domain.invocations import Invocation, Status
from tapgate.domain.principals import Principal
from tapgate.ports import UnitOfWork
from tapgate.services.context import Context, events_key, inbox_key
from tapgate.services.outbox import queue_push


async def open_approval(
    ctx: Context,
    uow: UnitOfWork,
    caller: Principal,
    invocation: Invocation,
    device: Device,
    capability: Capability,
    approvers: list[Device],
    rule: str,
    now: datetime,
    rule_line: int = 0,
    why: str = "",
) -> Invocation:
    """Write the waiting call and its approval, push it to every device that can sign, and journal it.
    The card names who asks (the agent token's name) and ``why``."""
    who = who_asks(caller.agent_name)
    preview = render_preview(capability, invocation.arguments, who, why)
    planned = action_sha256(invocation.tool, device.device_id, capability.name, invocation.arguments, preview)
    window = min(ctx.limits.approval_sign_ttl_seconds, ctx.limits.invocation_timeout_seconds)
    approval = Approval(
        tenant_id=invocation.tenant_id,
        approval_id=new_id("apr"),
        user_id=invocation.user_id,
        agent_id=invocation.agent_id,
        invocation_id=invocation.invocation_id,
        kind=capability.name,
        subject=device.device_id,
        prompt=prompt_for(device, capability, who),
        preview=preview,
        sign=new_sign_block(planned, now, window),
        binding_code=binding_code(),
        status=ApprovalStatus.PENDING,
        created_at=now,
        expires_at=now + timedelta(seconds=window),
        tool=invocation.tool,
        arguments=invocation.arguments,
    )
    waiting = replace(
        invocation,
        status=Status.AWAITING_APPROVAL,
        expires_at=approval.expires_at,
        binding_code=approval.binding_code,
        approval_id=approval.approval_id,
    )
    await uow.invocations.add(waiting)
    await uow.approvals.add(approval)
    for approver in approvers:
        await queue_push(uow, approver, APPROVAL_REQUESTED, approval.approval_id, now)
    await uow.journal.append(
        AuditRecord(
            "invocation.awaiting_approval",
            caller.actor,
            "awaiting_approval",
            subject=waiting.invocation_id,
            data={
                "tool": waiting.tool,
                "device_id": device.device_id,
                "capability": capability.name,
                "approval_id": approval.approval_id,
                "rule": rule or None,
                "rule_line": rule_line or None,
            },
        ),
        now,
    )
    await uow.events.append(
        waiting.user_id,
        APPROVAL_REQUESTED,
        {
            "approval_id": approval.approval_id,
            "invocation_id": waiting.invocation_id,
            "kind": approval.kind,
            "subject": approval.subject,
            "binding_code": approval.binding_code,
        },
        now,
    )
    uow.notify(inbox_key(waiting.tenant_id, waiting.user_id))
    uow.notify(events_key(waiting.tenant_id, waiting.user_id))
    return waiting
