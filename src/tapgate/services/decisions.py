"""An approval decided: marked once, journalled, and the person's inbox woken. What the decision then does
(a call goes on, a pairing completes, a console signs in) belongs to the approval's kind."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tapgate.domain.approvals import Decision
from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import Conflict
from tapgate.domain.inbox import Approval, ApprovalStatus
from tapgate.domain.principals import Principal
from tapgate.ports import UnitOfWork
from tapgate.services.context import inbox_key


async def record_decision(
    uow: UnitOfWork,
    caller: Principal,
    approval: Approval,
    decision: Decision,
    by: str,
    now: datetime,
    data: dict[str, Any],
) -> Approval:
    """Mark ``approval`` decided by ``by`` and journal ``approval.decided`` with ``data``. Raises Conflict
    when another decision came first."""
    status = ApprovalStatus.APPROVED if decision is Decision.APPROVED else ApprovalStatus.DENIED
    decided = approval.decided(status, by, now)
    if not await uow.approvals.decide(decided):
        raise Conflict("This approval was decided already.")
    await uow.journal.append(
        AuditRecord(
            "approval.decided",
            caller.actor,
            status.value,
            subject=approval.approval_id,
            data={"decided_by": by, **data},
        ),
        now,
    )
    uow.notify(inbox_key(approval.tenant_id, approval.user_id))
    return decided
