"""Passkeys: the device registers a WebAuthn credential; the operator sets who must use one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from tapgate.api.auth import Caller, DeviceDep, GatewayDep
from tapgate.api.schemas import Request

router = APIRouter(tags=["passkeys"])


class NewPasskey(Request):
    credential: dict[str, Any] = Field(
        description="What navigator.credentials.create returned, binary fields base64url (toJSON())"
    )


class PasskeyView(BaseModel):
    credential_id: str
    created_at: str


class PasskeyList(BaseModel):
    passkeys: list[PasskeyView]
    require_user_verification: bool = Field(description="Whether this user's decisions need a passkey")


class VerificationSetting(Request):
    require_user_verification: bool | None = Field(
        description="true or false for this user; null: the global setting applies"
    )


@router.get(
    "/v1/device/passkeys/options",
    summary="The options to create this device's passkey with (navigator.credentials.create)",
)
async def options(device: DeviceDep, gw: GatewayDep) -> dict[str, Any]:
    return await gw.passkey_options(device)


@router.post(
    "/v1/device/passkeys",
    status_code=201,
    response_model=PasskeyView,
    summary="Register this device's passkey",
)
async def register(body: NewPasskey, device: DeviceDep, gw: GatewayDep) -> PasskeyView:
    passkey = await gw.register_passkey(device, body.credential)
    return PasskeyView(credential_id=passkey.credential_id, created_at=passkey.created_at.isoformat())


@router.get("/v1/device/passkeys", response_model=PasskeyList, summary="This device's passkeys")
async def listed(device: DeviceDep, gw: GatewayDep) -> PasskeyList:
    found, required = await gw.list_passkeys(device)
    views = [PasskeyView(credential_id=p.credential_id, created_at=p.created_at.isoformat()) for p in found]
    return PasskeyList(passkeys=views, require_user_verification=required)


@router.put(
    "/v1/users/{user_id}/user-verification",
    status_code=204,
    response_class=Response,
    summary="Whether this user's decisions need a passkey (operator)",
)
async def set_verification(
    user_id: str, body: VerificationSetting, caller: Caller, gw: GatewayDep
) -> Response:
    await gw.set_user_verification(caller, user_id, body.require_user_verification)
    return Response(status_code=204)
