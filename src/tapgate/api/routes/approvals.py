"""The person's inbox and their signed decisions."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError

from tapgate.api.auth import AnyCaller, GatewayDep
from tapgate.api.errors import describe_validation
from tapgate.api.schemas import ApprovalView, DecisionAnswer, DecisionRequest, Inbox
from tapgate.domain.approvals import Decision
from tapgate.domain.errors import InvalidInput, MalformedRequest
from tapgate.domain.frames import approval_item
from tapgate.domain.inbox import Approval
from tapgate.domain.invocations import MAX_POLL_SECONDS
from tapgate.services.approving import DecisionBody

router = APIRouter(tags=["approvals"])


def approval_view(approval: Approval) -> ApprovalView:
    """The inbox item: the same object a device's link carries in ``device:approval``."""
    return ApprovalView.model_validate(approval_item(approval))


@router.get("/v1/inbox", response_model=Inbox, summary="Approvals waiting for the person (user or device)")
async def inbox(
    caller: AnyCaller,
    gw: GatewayDep,
    wait: Annotated[
        float, Query(ge=0, le=MAX_POLL_SECONDS, description="Seconds to wait for one to arrive")
    ] = 0,
) -> Inbox:
    return Inbox(approvals=[approval_view(a) for a in await gw.inbox(caller, wait)])


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise MalformedRequest(
                f"The body repeats the key {key!r}; a signed decision names each field once."
            )
        seen[key] = value
    return seen


@router.post(
    "/v1/approvals/{approval_id}",
    response_model=DecisionAnswer,
    summary="Decide an approval: signed by a device key (user, device, or operator without a signature)",
    openapi_extra={
        "requestBody": {
            "content": {"application/json": {"schema": DecisionRequest.model_json_schema()}},
            "required": True,
        }
    },
)
async def decide(approval_id: str, request: Request, caller: AnyCaller, gw: GatewayDep) -> DecisionAnswer:
    try:
        raw = json.loads(await request.body(), object_pairs_hook=_no_repeats)
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the parser goes
        if isinstance(e, MalformedRequest):
            raise
        raise MalformedRequest("The body is not valid JSON; send a JSON object.") from e
    if not isinstance(raw, dict):
        raise MalformedRequest("The body must be a JSON object.")
    try:
        body = DecisionRequest.model_validate(raw)
    except ValidationError as e:
        _, _, message = describe_validation(list(e.errors()))  # type: ignore[arg-type]
        raise InvalidInput("body", message) from None
    decided = await gw.decide(
        caller,
        approval_id,
        DecisionBody(
            Decision(body.decision), body.device_id, body.signature, body.message, body.not_me, body.passkey
        ),
    )
    return DecisionAnswer(id=decided.approval_id, status=decided.status.value)
