"""The requests every call runs — an agent's call and its read, a device's long-poll, answer, message and
heartbeat — served ahead of the framework where their route has a plan, with what its layers do for them
done here.

Each layer a request passes through costs CPU on every call, and a request that waits (a long-poll, a call
held for its answer) keeps a frame of every layer for as long as it waits: Starlette's and FastAPI's
middleware, routing and exception layers (three ``AsyncExitStack``s among them) and tapgate's own (what
that costs: the package's docstring). So a request to a route served by a plan (``plan.py``), in the shape
the plan serves, is served here by one coroutine that does what the layers would do for it: the request's
metrics and access log (``Observe``), the body's limit (``BodyLimit``) and its repeated keys
(``NoRepeatedKeys``), and for a request that may hold the token's stream slot (``StreamLimit``) and its
watch (``EndOnLapse``), and the errors' answers (``errors.py``). Any other request — a body over the
limit, sent without a length or repeating a key, a stream slot refused, anything the plan does not serve —
goes through the whole stack with its body replayed, and is answered there as always.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tapgate.api.errors import crash_response, tapgate_error_response
from tapgate.api.fast.plan import Plan, plan_for
from tapgate.api.json_keys import parse_once
from tapgate.api.lapse import bearer, holds, serve_watched
from tapgate.api.middleware import HttpMetrics
from tapgate.api.replay import read_whole, replaying
from tapgate.api.streams import StreamSlots, is_stream
from tapgate.domain.errors import TapgateError
from tapgate.gateway import Gateway

Full = Callable[[Scope, Receive, Send], Awaitable[None]]


class ServedAhead:
    """The planned routes, served ahead of the framework (``serve``)."""

    def __init__(
        self,
        routes: Sequence[APIRoute],
        gateway: Gateway,
        metrics: HttpMetrics,
        slots: StreamSlots,
        max_body_bytes: int,
    ) -> None:
        self._routes = [(r, p) for r in routes if (p := plan_for(r)) is not None]
        self._gateway = gateway
        self._metrics = metrics
        self._slots = slots
        self._max_body_bytes = max_body_bytes

    def takes(self, scope: Scope) -> bool:
        """Whether ``scope`` is an HTTP request of the API (``serve`` then finds its route, if planned)."""
        if scope["type"] != "http":
            return False
        path: str = scope["path"]
        return path.startswith("/v1/")

    async def serve(self, app: ASGIApp, full: Full, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request here if its route has a plan and it is in the plan's shape; else ``full``,
        the whole stack, serves it (with the body read here replayed)."""
        started = time.perf_counter()
        matched = self._match(scope)
        if matched is None:
            await full(scope, receive, send)
            return
        route, plan, path_params = matched
        body, messages = await self._body(scope, receive)
        replay = replaying(messages, receive)
        if body is None:
            await full(scope, replay, send)
            return
        data: Any = None
        if body.lstrip()[:1] in (b"{", b"["):
            data, repeated = parse_once(body)  # one parse for the repeated keys and the plan
            if repeated is not None:  # NoRepeatedKeys refuses it
                await full(scope, replay, send)
                return
        token = bearer(scope)
        scope["app"], scope["path_params"] = app, path_params  # as Starlette and its router set them
        request = Request(scope, replay)
        values = await plan.shaped(request, data)
        slot = StreamSlots.key(token) if token and is_stream(scope) else None
        if values is None or token is None or (slot is not None and not self._slots.take(slot)):
            await full(scope, replaying(messages, receive), send)
            return
        status = 500  # if it ends without an answer (the client went away)
        try:
            if holds(scope):
                answer = functools.partial(_answer, plan, request, values)
                status = await serve_watched(self._gateway, token, answer, scope, replay, send)
            else:
                response = await _response(plan, request, values)
                status = response.status_code
                await response(scope, replay, send)
        finally:
            if slot is not None:
                self._slots.give(slot)
            self._metrics.record(scope["method"], route.path, status, started)

    def _match(self, scope: Scope) -> tuple[APIRoute, Plan, dict[str, Any]] | None:
        for route, plan in self._routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                return route, plan, child["path_params"]
        return None

    async def _body(self, scope: Scope, receive: Receive) -> tuple[bytes | None, list[Message]]:
        """The request's body and the messages it came in; None for a body this path does not take (over
        the limit, or of no announced length: the whole stack refuses those)."""
        length: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                return None, []
        if length is None:
            return (b"", []) if scope["method"] == "GET" else (None, [])
        if not length.isdigit() or int(length) > self._max_body_bytes:
            return None, []
        return await read_whole(receive)


async def _response(plan: Plan, request: Request, values: dict[str, Any]) -> Response:
    """The plan's endpoint, called with its caller: its answer, or its error's."""
    try:
        return plan.respond(await plan.endpoint(**await plan.authenticated(request, values)))
    except TapgateError as e:
        return tapgate_error_response(e)
    except Exception as e:
        return crash_response(e)


async def _answer(
    plan: Plan, request: Request, values: dict[str, Any], scope: Scope, receive: Receive, send: Send
) -> None:
    """``_response``, sent."""
    await (await _response(plan, request, values))(scope, receive, send)
