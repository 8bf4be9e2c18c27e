"""Pairing: the person's flow from QR code to consent."""

from __future__ import annotations

from fastapi import APIRouter, Response

from tapgate.api import qr as qr_code
from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.schemas import Consent, DeviceAnswer, NewPairing, Pair, Paired, PairingStarted, PairingView
from tapgate.api.views import device_view

router = APIRouter(tags=["pairing"])


@router.post(
    "/v1/users/{user_id}/pairings",
    status_code=201,
    response_model=PairingStarted,
    summary="Start a pairing: a single-use code, as a link and a QR code",
)
async def start(
    user_id: str, caller: Caller, gw: GatewayDep, body: NewPairing | None = None
) -> PairingStarted:
    pairing, url = await gw.start_pairing(caller, user_id)
    assert pairing.code is not None
    return PairingStarted(
        pairing_id=pairing.pairing_id, code=pairing.code, url=url, expires_at=pairing.expires_at.isoformat()
    )


@router.get("/v1/pairings/{pairing_id}", response_model=PairingView, summary="A pairing's state")
async def show(pairing_id: str, caller: Caller, gw: GatewayDep) -> PairingView:
    pairing, device = await gw.pairing(caller, pairing_id)
    return PairingView(
        pairing_id=pairing.pairing_id,
        status=pairing.status.value,
        expires_at=pairing.expires_at.isoformat(),
        device=device_view(device) if device else None,
    )


@router.get(
    "/v1/pairings/{pairing_id}/qr.svg",
    response_class=Response,
    summary="The pairing link as a QR code",
    responses={200: {"content": {"image/svg+xml": {}}}},
)
async def qr(pairing_id: str, caller: Caller, gw: GatewayDep) -> Response:
    url = await gw.pairing_link(caller, pairing_id)
    code = qr_code.svg(url, scale=6, title="Scan to pair with tapgate")
    return Response(code, media_type="image/svg+xml", headers={"Cache-Control": "no-store"})


@router.post("/v1/pair", status_code=201, response_model=Paired, summary="A device claims a pairing code")
async def pair(body: Pair, gw: GatewayDep) -> Paired:
    claimed = await gw.claim_pairing(body.model_dump())
    assert claimed.pairing.comparison_code is not None
    return Paired(
        pairing_id=claimed.pairing.pairing_id,
        device_id=claimed.device.device_id,
        device_token=claimed.token,
        comparison_code=claimed.pairing.comparison_code,
        status=claimed.pairing.status.value,
    )


@router.post(
    "/v1/pairings/{pairing_id}/consent",
    response_model=DeviceAnswer,
    summary="The person confirms with the device's comparison code, and picks grants",
)
async def consent(pairing_id: str, body: Consent, caller: Caller, gw: GatewayDep) -> DeviceAnswer:
    device = await gw.consent_pairing(caller, pairing_id, body.comparison_code, body.approved, body.grants)
    return DeviceAnswer(device=device_view(device))
