"""The agent runtime's event stream, as Server-Sent Events resumable with Last-Event-ID."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from tapgate.api.auth import Caller, GatewayDep

router = APIRouter(tags=["events"])


@router.get(
    "/v1/events",
    response_class=StreamingResponse,
    summary="The user's events (Server-Sent Events)",
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def events(
    caller: Caller,
    gw: GatewayDep,
    last_event_id: Annotated[int | None, Header(ge=0, le=2**62)] = None,
    after: Annotated[int, Query(ge=0, le=2**62, description="Start after this event id")] = 0,
) -> StreamingResponse:
    stream = gw.events(caller, last_event_id if last_event_id is not None else after)

    async def lines() -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        async for event in stream:
            if event is None:
                yield ": keep-alive\n\n"
                continue
            data = json.dumps({"type": event.type, "created_at": event.created_at.isoformat(), **event.data})
            yield f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n"

    return StreamingResponse(
        lines(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
