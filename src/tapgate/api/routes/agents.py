"""What agents call: sessions and the tool list."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.schemas import MessageBody, MessageRecorded, SessionAnswer, SessionBody, ToolList
from tapgate.api.views import session_view
from tapgate.domain.tools import ToolFormat

router = APIRouter(tags=["agents"])


@router.put("/v1/sessions/{session_id}", response_model=SessionAnswer, summary="Create or update a session")
async def put_session(session_id: str, body: SessionBody, caller: Caller, gw: GatewayDep) -> SessionAnswer:
    return SessionAnswer(
        session=session_view(await gw.put_session(caller, session_id, body.kind, body.attended))
    )


@router.post(
    "/v1/sessions/{session_id}/messages",
    status_code=201,
    response_model=MessageRecorded,
    summary="Record which device a message came from and what it could do",
)
async def record_message(
    session_id: str, body: MessageBody, caller: Caller, gw: GatewayDep
) -> MessageRecorded:
    session = await gw.record_message(caller, session_id, body.device_id, body.capabilities)
    return MessageRecorded(session_id=session.session_id, phone_action=session.phone_device_uid is not None)


@router.get("/v1/tools", response_model=ToolList, summary="The tools this agent may call")
async def list_tools(
    caller: Caller,
    gw: GatewayDep,
    session_id: Annotated[str | None, Query(max_length=100)] = None,
    format: Annotated[Literal["openai", "mcp"], Query()] = "openai",
) -> ToolList:
    return ToolList(tools=await gw.tools(caller, session_id, ToolFormat(format)))
