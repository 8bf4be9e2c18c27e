"""The device's own requests, each revalidating the device first."""

from __future__ import annotations

from fastapi import APIRouter, Response

from tapgate.api.auth import DeviceDep, GatewayDep
from tapgate.api.schemas import Capabilities, DeviceAnswer
from tapgate.api.views import device_view

router = APIRouter(prefix="/v1/device", tags=["device"])


@router.put("/capabilities", response_model=DeviceAnswer, summary="Re-declare the device's capabilities")
async def redeclare(body: Capabilities, device: DeviceDep, gw: GatewayDep) -> DeviceAnswer:
    return DeviceAnswer(device=device_view(await gw.redeclare_capabilities(device, body.capabilities)))


@router.post("/heartbeat", status_code=204, response_class=Response, summary="Say the device is present")
async def heartbeat(device: DeviceDep) -> Response:
    return Response(status_code=204)
