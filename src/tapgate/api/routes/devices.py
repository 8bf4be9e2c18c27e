"""A person's devices: enrol (operator), list, grant, revoke."""

from __future__ import annotations

from fastapi import APIRouter, Response

from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.schemas import DeviceAnswer, DeviceList, EnrolDevice, EnrolledDevice, Grants
from tapgate.api.views import device_view

router = APIRouter(prefix="/v1/users/{user_id}/devices", tags=["devices"])


@router.post("", status_code=201, response_model=EnrolledDevice, summary="Enrol a device (operator)")
async def enrol(user_id: str, body: EnrolDevice, caller: Caller, gw: GatewayDep) -> EnrolledDevice:
    new = await gw.enrol_device(caller, user_id, body.model_dump())
    return EnrolledDevice(device=device_view(new.device), device_token=new.token)


@router.get("", response_model=DeviceList, summary="The user's devices (operator, or that user)")
async def list_devices(user_id: str, caller: Caller, gw: GatewayDep) -> DeviceList:
    return DeviceList(devices=[device_view(d) for d in await gw.list_devices(caller, user_id)])


@router.put("/{device_id}/grants", response_model=DeviceAnswer, summary="Grant or withdraw capabilities")
async def set_grants(
    user_id: str, device_id: str, body: Grants, caller: Caller, gw: GatewayDep
) -> DeviceAnswer:
    return DeviceAnswer(device=device_view(await gw.set_grants(caller, user_id, device_id, body.grants)))


@router.delete("/{device_id}", status_code=204, response_class=Response, summary="Revoke a device")
async def revoke(user_id: str, device_id: str, caller: Caller, gw: GatewayDep) -> Response:
    await gw.revoke_device(caller, user_id, device_id)
    return Response(status_code=204)
