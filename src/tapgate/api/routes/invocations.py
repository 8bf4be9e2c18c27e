"""Agents invoke device tools and read the answers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.schemas import InvocationBody, InvocationView
from tapgate.domain.invocations import MAX_WAIT_SECONDS
from tapgate.services.invoking import Call

router = APIRouter(prefix="/v1/invocations", tags=["invocations"])


@router.post("", response_model=InvocationView, summary="Call a device tool (refusals are 200s)")
async def invoke(body: InvocationBody, caller: Caller, gw: GatewayDep) -> InvocationView:
    call = Call(
        tool=body.tool,
        arguments=body.arguments,
        invocation_id=body.invocation_id,
        session_id=body.session_id,
        run_id=body.run_id,
        origin=body.origin,
        shadow=body.shadow,
        if_offline=body.if_offline,
    )
    return InvocationView.model_validate((await gw.invoke(caller, call, body.wait)).as_dict())


@router.get(
    "/{invocation_id}", response_model=InvocationView, summary="An invocation, waiting for its answer"
)
async def read(
    invocation_id: str,
    caller: Caller,
    gw: GatewayDep,
    wait: Annotated[
        float, Query(ge=0, le=MAX_WAIT_SECONDS, description="Seconds to wait for the answer")
    ] = 0,
) -> InvocationView:
    return InvocationView.model_validate((await gw.invocation(caller, invocation_id, wait)).as_dict())
