"""The device's own requests, each revalidating the device first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from tapgate.api.auth import DeviceDep, GatewayDep
from tapgate.api.schemas import (
    Capabilities,
    DeviceInvocation,
    DeviceInvocations,
    IngestBody,
    Ingested,
    Redeclared,
    ResultAccepted,
    ResultBody,
)
from tapgate.api.views import device_invocation, device_view
from tapgate.domain.invocations import MAX_POLL_SECONDS

router = APIRouter(prefix="/v1/device", tags=["device"])


@router.put("/capabilities", response_model=Redeclared, summary="Re-declare the device's capabilities")
async def redeclare(body: Capabilities, device: DeviceDep, gw: GatewayDep) -> Redeclared:
    done = await gw.redeclare_capabilities(device, body.capabilities)
    return Redeclared(
        device=device_view(done.device),
        grants_asked=done.asked,
        grants_not_asked=done.unasked,
        note=done.note,
    )


@router.post("/heartbeat", status_code=204, response_class=Response, summary="Say the device is present")
async def heartbeat(device: DeviceDep, gw: GatewayDep) -> Response:
    await gw.heartbeat(device)
    return Response(status_code=204)


@router.get("/invocations", response_model=DeviceInvocations, summary="Long-poll the device's pending work")
async def pending(
    device: DeviceDep,
    gw: GatewayDep,
    wait: Annotated[float, Query(ge=0, le=MAX_POLL_SECONDS, description="Seconds to wait for work")] = 0,
) -> DeviceInvocations:
    found = await gw.device_pending(device, wait)
    return DeviceInvocations(invocations=[DeviceInvocation(**device_invocation(i)) for i in found])


@router.post(
    "/invocations/{invocation_id}/result",
    response_model=ResultAccepted,
    summary="Answer an invocation, exactly once",
    responses={
        409: {"description": "Answered already; the body holds the first answer"},
        410: {"description": "Expired"},
    },
)
async def answer(invocation_id: str, body: ResultBody, device: DeviceDep, gw: GatewayDep) -> ResultAccepted:
    answered = await gw.device_answer(device, invocation_id, body.status, body.message)
    return ResultAccepted(id=answered.invocation_id, status=answered.status.value)


@router.post(
    "/ingest",
    status_code=202,
    response_model=Ingested,
    summary="Forward a received SMS: kept once, capped per UTC day, routed to triage as untrusted",
    responses={429: {"description": "Past the device's daily cap; Retry-After says when it resets"}},
)
async def ingest(body: IngestBody, device: DeviceDep, gw: GatewayDep) -> Ingested:
    done = await gw.ingest(device, body.channel, body.sender, body.body, body.received_at)
    return Ingested(receipt=done.receipt, duplicate=done.duplicate, session_id=done.session_id)
