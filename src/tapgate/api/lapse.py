"""Requests that hold a token open (long-polls, event streams, the MCP endpoint) end the moment the token
is revoked, in any process, or expires: 401 if nothing was answered yet, else the stream is closed.

Short requests are not watched: they finish before a revocation could matter, and each would pay a task.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tapgate.api.errors import error_response
from tapgate.domain.errors import Unauthenticated
from tapgate.gateway import Gateway

_HOLDING_PATHS = ("/v1/events", "/mcp")
_GONE = "This token was revoked or has expired; ask for a new one."


def bearer(scope: Scope) -> str | None:
    """The bearer token of a request's Authorization header, if it has one."""
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
    """Serves a holding request in its own task, with a watch on its token (no task of its own while
    nothing happens); a lapse cancels the request where it waits, and it is answered as above."""

    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = bearer(scope) if scope["type"] == "http" and holds(scope) else None
        if token is None:
            await self.app(scope, receive, send)
            return
        await serve_watched(self.gateway, token, self.app, scope, receive, send)


async def serve_watched(
    gateway: Gateway, token: str, app: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> int:
    """Serve ``app`` with a watch on ``token``: a lapse cancels it where it waits, and the request is
    answered 401 if nothing was answered yet, else its stream is closed. Returns the status answered
    (500 if none was)."""
    request = asyncio.current_task()
    assert request is not None
    serving = finished = lapsed = False
    started = 0  # the status answered, once it is

    def lapse() -> None:
        nonlocal lapsed
        if serving and not finished:  # never a cancel that could land outside the app
            lapsed = True
            request.cancel()

    async def sending(message: Message) -> None:
        nonlocal started, finished
        if message["type"] == "http.response.start":
            started = message["status"]
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            finished = True
        await send(message)

    async with gateway.watch_token(token, lapse):
        serving = True
        try:
            await app(scope, receive, sending)
        except asyncio.CancelledError:
            if not lapsed:
                raise
        finally:
            serving = False
            if lapsed:
                request.uncancel()  # the lapse is handled here; the task goes on to answer
    if not lapsed or finished:
        return started or 500
    with contextlib.suppress(Exception):  # the client may have gone already
        if not started:
            headers = {"WWW-Authenticate": "Bearer"}
            await error_response(401, Unauthenticated.code, _GONE, headers)(scope, receive, send)
            return 401
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    return started or 500
