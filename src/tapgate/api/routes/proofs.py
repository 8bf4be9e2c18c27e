"""Proofs: the issuer's public keys for anyone, and the proof of an approval, a mandate or a call for the
person, the agent whose it was, and the operator."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from tapgate.api.auth import AnyCaller, GatewayDep

router = APIRouter(tags=["proofs"])

SD_JWT = "application/dc+sd-jwt"
Disclose = Annotated[
    Literal["all", "none"],
    Query(description="'none' leaves every argument value out; the proof still verifies"),
]
_PROOF: dict[int | str, dict[str, Any]] = {
    200: {"content": {SD_JWT: {"schema": {"type": "string"}}}, "description": "The SD-JWT"}
}


def proof_response(text: str, name: str) -> Response:
    """A proof as a download named ``<name>.sd-jwt``."""
    return Response(
        text,
        media_type=SD_JWT,
        headers={"Content-Disposition": f'attachment; filename="{name}.sd-jwt"', "Cache-Control": "no-store"},
    )


@router.get("/.well-known/jwks.json", summary="The issuer's public keys that proofs are signed with")
async def issuer_keys(gw: GatewayDep) -> Response:
    keys: dict[str, Any] = await gw.issuer_keys()
    return JSONResponse(keys, media_type="application/jwk-set+json")


@router.get(
    "/v1/approvals/{approval_id}/proof",
    response_class=Response,
    responses=_PROOF,
    summary="A decided approval as a proof anyone can check offline (the person, the agent, the operator)",
)
async def approval_proof(
    approval_id: str, caller: AnyCaller, gw: GatewayDep, disclose: Disclose = "all"
) -> Response:
    text = await gw.approval_proof(caller, approval_id, disclose == "all")
    return proof_response(text, f"approval-{approval_id}")


@router.get(
    "/v1/mandates/{mandate_id}/proof",
    response_class=Response,
    responses=_PROOF,
    summary="A signed mandate as a proof anyone can check offline",
)
async def mandate_proof(mandate_id: str, caller: AnyCaller, gw: GatewayDep) -> Response:
    return proof_response(await gw.mandate_proof(caller, mandate_id), f"mandate-{mandate_id}")


@router.get(
    "/v1/invocations/{invocation_id}/proof",
    response_class=Response,
    responses=_PROOF,
    summary="A call's proof: the approval the person signed for it, or the mandate it went under",
)
async def invocation_proof(
    invocation_id: str,
    caller: AnyCaller,
    gw: GatewayDep,
    disclose: Disclose = "all",
    user_id: Annotated[str | None, Query(max_length=40, description="The operator names the person")] = None,
) -> Response:
    text = await gw.invocation_proof(caller, invocation_id, disclose == "all", user_id)
    return proof_response(text, f"call-{invocation_id}")
