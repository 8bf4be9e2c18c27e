"""The phone's half of a console sign-in: it scanned the console's code and asks its person."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from tapgate.api.auth import DeviceDep, GatewayDep
from tapgate.api.routes.approvals import approval_view
from tapgate.api.schemas import ApprovalView

router = APIRouter(tags=["console"])


@router.post(
    "/v1/console/sign-ins/{sign_in_id}/ask",
    response_model=ApprovalView,
    status_code=201,
    summary="A paired device opens the console_login approval for the sign-in its person scanned",
)
async def ask(
    sign_in_id: Annotated[str, Path(description="From the console's QR code", max_length=16)],
    device: DeviceDep,
    gw: GatewayDep,
    request: Request,
) -> ApprovalView:
    address = request.client.host if request.client else ""
    return approval_view(await gw.ask_console_sign_in(device, sign_in_id, address))
