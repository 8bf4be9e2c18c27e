"""Requests that hold a token open (long-polls, event streams, the MCP endpoint) end the moment the token
is revoked, in any process, or expires: 401 if nothing was answered yet, else the stream is closed.

Short requests are not watched: they finish before a revocation could matter, and each would pay a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tapgate.api.errors import error_response
from tapgate.domain.errors import Unauthenticated
from tapgate.gateway import Gateway

log = logging.getLogger(__name__)
_HOLDING_PATHS = ("/v1/events", "/mcp")
_GONE = "This token was revoked or has expired; ask for a new one."


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def holds(scope: Scope) -> bool:
    """Whether the request may stay open for long: a stream, or a call that waits for an answer."""
    path: str = scope["path"]
    if path.startswith(_HOLDING_PATHS):
        return True
    if b"wait=" in scope.get("query_string", b""):
        return True
    return scope["method"] == "POST" and path == "/v1/invocations"


class EndOnLapse:
    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _bearer(scope) if scope["type"] == "http" and holds(scope) else None
        if token is None:
            await self.app(scope, receive, send)
            return
        started = finished = False

        async def sending(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        async def serve() -> None:
            await self.app(scope, receive, sending)

        serving = asyncio.create_task(serve())
        lapsing = asyncio.create_task(self.gateway.token_lapses(token))
        try:
            await asyncio.wait({serving, lapsing}, return_when=asyncio.FIRST_COMPLETED)
            lapsed = not serving.done() and lapsing.done() and _ended_cleanly(lapsing)
            if not lapsed:
                await serving  # its answer goes out (or its error propagates); the watch is dropped
                return
        finally:
            for task in (serving, lapsing):
                if not task.done():
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(lapsing, return_exceptions=True)
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await serving
        if finished:
            return
        with contextlib.suppress(Exception):  # the client may have gone already
            if not started:
                headers = {"WWW-Authenticate": "Bearer"}
                await error_response(401, Unauthenticated.code, _GONE, headers)(scope, receive, send)
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def _ended_cleanly(task: asyncio.Task[None]) -> bool:
    """The watch returned (the token lapsed); a watch that failed says nothing about the token."""
    if task.cancelled():
        return False
    error = task.exception()
    if error is not None:
        log.warning("token watch failed", extra={"error": type(error).__name__})
        return False
    return True
