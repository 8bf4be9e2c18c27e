"""A ``grant`` approval decided: a signed yes grants the capability the device asked for, at the bar the
person saw; a no changes nothing. Every decision is journalled like any other approval's."""

from __future__ import annotations

from datetime import datetime

from tapgate.domain.approvals import Decision
from tapgate.domain.devices import DeviceStatus
from tapgate.domain.errors import Conflict
from tapgate.domain.inbox import Approval, ApprovalStatus
from tapgate.domain.principals import Principal
from tapgate.ports import UnitOfWork
from tapgate.services.decisions import record_decision
from tapgate.services.devices import change_grants


async def grant_decided(
    uow: UnitOfWork,
    caller: Principal,
    approval: Approval,
    decision: Decision,
    by: str,
    device_id: str | None,
    now: datetime,
) -> Approval:
    """Apply a checked decision on a ``grant`` approval. Raises Conflict when the device, or what it
    declares, is no longer what the person was shown (the approval stays open until it expires)."""
    assert approval.arguments is not None
    entry = approval.arguments["capability"]
    device = await uow.devices.get(approval.user_id, approval.subject)
    declared = device.declared(str(entry["name"])) if device is not None else None
    if (
        device is None
        or device.status is not DeviceStatus.ACTIVE
        or device.created_at > approval.created_at
        or declared is None
        or declared.capability.as_dict() != entry
    ):
        raise Conflict("The device no longer declares what it asked you to grant; nothing was changed.")
    data = {"device_id": device_id, "kind": approval.kind, "capability": declared.capability.name}
    decided = await record_decision(uow, caller, approval, decision, by, now, data)
    if decided.status is ApprovalStatus.APPROVED:
        await change_grants(uow, caller.actor, device, {declared.capability.name: True}, now)
    return decided
