"""A ``device_pair`` approval decided: a signed yes from a device the person has lets the new device in;
a no cancels the pairing. Every decision is journalled like any other approval's."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from tapgate.domain.approvals import Decision
from tapgate.domain.errors import Conflict, Gone
from tapgate.domain.inbox import Approval, ApprovalStatus
from tapgate.domain.pairing import PairingStatus
from tapgate.domain.principals import Principal
from tapgate.ports import UnitOfWork
from tapgate.services.decisions import record_decision
from tapgate.services.pairings import cancel, confirm


async def vouched(
    uow: UnitOfWork,
    caller: Principal,
    approval: Approval,
    decision: Decision,
    by: str,
    device_id: str | None,
    now: datetime,
) -> Approval:
    """Apply a checked decision on a ``device_pair`` approval to its pairing. Raises Conflict, Gone."""
    assert approval.arguments is not None
    pairing = await uow.pairings.get(str(approval.arguments["pairing_id"]), for_update=True)
    device = await uow.devices.by_uid(pairing.device_uid) if pairing and pairing.device_uid else None
    if pairing is None or device is None or device.device_id != approval.subject:
        raise Conflict("The pairing this approval was for is gone.")
    current = pairing.current(now)
    if current.status is PairingStatus.EXPIRED:
        raise Gone("This pairing has expired; start a new one.")
    if current.status is not PairingStatus.AWAITING_CONSENT:
        raise Conflict(f"This pairing is {current.status.value}; it is not waiting for consent.")
    data = {"device_id": device_id, "pairing_id": pairing.pairing_id}
    decided = await record_decision(uow, caller, approval, decision, by, now, data)
    if decided.status is ApprovalStatus.APPROVED:
        confirmed = replace(current, status=PairingStatus.CONFIRMED, decided_at=now)
        await uow.pairings.save(confirmed)
        await confirm(uow, confirmed, device, [], caller.actor, by, now)
    else:
        declined = replace(current, status=PairingStatus.DECLINED, decided_at=now)
        await uow.pairings.save(declined)
        await cancel(uow, declined, device, caller.actor, now)
    return decided
