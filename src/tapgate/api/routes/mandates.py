"""Standing mandates: an agent asks for one, the person (or the operator) reads and revokes them."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from tapgate.api.auth import AnyCaller, Caller, GatewayDep
from tapgate.api.schemas import MandateList, MandateRequest, MandateView
from tapgate.domain.errors import MalformedRequest
from tapgate.domain.mandates import Mandate
from tapgate.gateway import Gateway

router = APIRouter(prefix="/v1/mandates", tags=["mandates"])


def mandate_view(gw: Gateway, mandate: Mandate) -> MandateView:
    return MandateView.model_validate(mandate.as_dict(gw.clock.now()))


@router.post(
    "",
    status_code=202,
    summary="Ask the person for a standing mandate (agent or user token); it waits for their signature",
    openapi_extra={
        "requestBody": {
            "content": {"application/json": {"schema": MandateRequest.model_json_schema()}},
            "required": True,
        }
    },
)
async def request_mandate(request: Request, caller: Caller, gw: GatewayDep) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError) as e:
        raise MalformedRequest("The body is not valid JSON; send a JSON object.") from e
    if not isinstance(body, dict):
        raise MalformedRequest("The body must be a JSON object.")
    mandate = await gw.request_mandate(caller, body)
    return {
        "mandate_id": mandate.mandate_id,
        "status": mandate.status_at(gw.clock.now()).value,
        "approval_id": mandate.approval_id,
    }


@router.get("", response_model=MandateList, summary="Mandates: the person's, an agent's own, or a user's")
async def list_mandates(
    caller: AnyCaller,
    gw: GatewayDep,
    user_id: Annotated[str | None, Query(max_length=40, description="The operator names the person")] = None,
) -> MandateList:
    found = await gw.list_mandates(caller, user_id)
    return MandateList(mandates=[mandate_view(gw, m) for m in found])


@router.get("/{mandate_id}", response_model=MandateView, summary="One mandate, with its uses and status")
async def read_mandate(mandate_id: str, caller: AnyCaller, gw: GatewayDep) -> MandateView:
    return mandate_view(gw, await gw.mandate(caller, mandate_id))


@router.delete(
    "/{mandate_id}", status_code=204, summary="Revoke a mandate: no call uses it after, in any process"
)
async def revoke_mandate(mandate_id: str, caller: AnyCaller, gw: GatewayDep) -> Response:
    await gw.revoke_mandate(caller, mandate_id)
    return Response(status_code=204)
