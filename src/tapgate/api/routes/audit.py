"""The audit journal, read by the tenant's operator."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.schemas import AuditEntryView, AuditPage

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", response_model=AuditPage, summary="Read the audit journal in order (operator)")
async def read_audit(
    caller: Caller,
    gw: GatewayDep,
    # Bounded to what a database integer holds: a larger number is a 422, not a driver overflow.
    after: Annotated[int, Query(le=2**62, description="Return entries after this sequence number")] = 0,
    limit: Annotated[int, Query(description="At most this many entries (1-1000)")] = 100,
) -> AuditPage:
    entries = await gw.audit(caller, after, limit)
    views = [AuditEntryView.model_validate(entry.as_dict()) for entry in entries]
    return AuditPage(entries=views, next=entries[-1].seq if len(entries) == limit else None)
