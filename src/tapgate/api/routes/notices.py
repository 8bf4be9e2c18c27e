"""Notices: an agent's heads-up to the person's devices (mounted only with the device flags on)."""

from __future__ import annotations

from fastapi import APIRouter

from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.schemas import NoticeAnswer, NoticeBody

router = APIRouter(tags=["notices"])


@router.post(
    "/v1/notices",
    status_code=202,
    response_model=NoticeAnswer,
    summary="Push a content-free notice to the person's devices (agent with 'notices', or operator)",
)
async def notice(body: NoticeBody, caller: Caller, gw: GatewayDep) -> NoticeAnswer:
    delivered = await gw.notice(caller, body.event, body.user_id, body.data, body.ui)
    return NoticeAnswer(delivered_to=delivered)
