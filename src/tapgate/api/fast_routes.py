"""The hot JSON routes (an agent's call and its read, a device's long-poll, answer and forwarded message)
without FastAPI's per-request machinery, and with its behaviour.

FastAPI resolves a route's parameters for every request with general code: the dependency graph, the
body's content type, a second validation of the returned model. For a route whose parameters are only a
JSON body model, path strings, query parameters and tapgate's own dependencies (the gateway, a caller by
bearer token), ``FastRoute`` plans that work once, when the route is built. A request in the plain shape
(a JSON object that validates, sent as ``application/json`` with a bearer token; query parameters that
FastAPI's own field validation accepts) is read, validated with the same model and handed to the same
endpoint, whose returned model is written as FastAPI writes it. Anything else (a malformed or invalid
body or query, another content type, no token) goes to FastAPI's own handler, so every error is the one
FastAPI gives. About 140 µs of a call's CPU on the 2-core bench machine (docs/performance.md, seventh
step). A route with anything more (a header or cookie parameter, another dependency) is served by
FastAPI unchanged.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import fastapi.routing
from fastapi import APIRouter, Request, Response
from fastapi.dependencies.utils import request_params_to_args
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tapgate.api.auth import GATEWAY_DEPENDENCY, ByToken, bearer_token, gateway
from tapgate.gateway import Gateway

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


@dataclass(frozen=True)
class _Plan:
    endpoint: Callable[..., Awaitable[Any]]
    body: tuple[str, type[BaseModel]] | None  # the body parameter's name and model
    path: tuple[str, ...]  # path parameters, strings
    query: tuple[Any, ...]  # query parameters, as FastAPI's fields (it validates them)
    by_token: tuple[tuple[str, Callable[[Gateway, str], Awaitable[Any]]], ...]  # the caller's parameter
    gateway: tuple[str, ...]  # parameters that take the gateway
    status_code: int

    async def values(self, request: Request) -> dict[str, Any] | None:
        """The endpoint's arguments, or None when the request is not in the plain shape."""
        values: dict[str, Any] = {}
        if self.body is not None:
            if request.headers.get("content-type") != "application/json":
                return None
            try:
                data = json.loads(await request.body())
            except (ValueError, RecursionError):  # FastAPI's handler says which, as it always does
                return None
            if not isinstance(data, dict):
                return None
            name, model = self.body
            try:
                values[name] = model.model_validate(data)
            except (ValidationError, RecursionError):
                return None
        token = bearer_token(request) if self.by_token else None
        if self.by_token and token is None:
            return None
        for name in self.path:
            values[name] = request.path_params[name]
        if self.query:
            found, errors = request_params_to_args(self.query, request.query_params)
            if errors:
                return None
            values.update(found)
        gw = gateway(request)
        for name in self.gateway:
            values[name] = gw
        for name, authenticate in self.by_token:  # last: past this point the request is served here
            assert token is not None
            values[name] = await authenticate(gw, token)
        return values

    def respond(self, result: Any) -> Response:
        if isinstance(result, Response):
            return result
        model: BaseModel = result
        content = model.__pydantic_serializer__.to_json(model, by_alias=True)
        return Response(content, status_code=self.status_code, media_type="application/json")


def _dependant(route: APIRoute) -> Any:
    """The dependant FastAPI serves ``route`` with: an included route's carries its router's
    dependencies too. None when this FastAPI does not say (then no plan is made)."""
    var = getattr(fastapi.routing, "_effective_route_context_var", None)
    if var is None:
        return None
    context = var.get()
    if context is not None and getattr(context, "original_route", None) is route:
        return getattr(context, "dependant", None)
    return route.dependant


def _plan(route: APIRoute) -> _Plan | None:
    dependant = _dependant(route)
    if dependant is None or dependant.header_params or dependant.cookie_params:
        return None
    hints = typing.get_type_hints(route.endpoint)
    returned = hints.get("return")
    if not (
        (isinstance(returned, type) and issubclass(returned, Response))
        or (
            returned is route.response_model
            and isinstance(returned, type)
            and issubclass(returned, BaseModel)
        )
    ):
        return None
    body: tuple[str, type[BaseModel]] | None = None
    if dependant.body_params:
        if len(dependant.body_params) != 1:
            return None
        param = dependant.body_params[0]
        model = hints.get(param.name)
        if getattr(param.field_info, "embed", False) or not (
            isinstance(model, type) and issubclass(model, BaseModel)
        ):
            return None
        body = (param.name, model)
    if any(hints.get(p.name) is not str for p in dependant.path_params):
        return None
    by_token: list[tuple[str, Callable[[Gateway, str], Awaitable[Any]]]] = []
    gateways: list[str] = []
    for dependency in dependant.dependencies:
        if dependency.call is GATEWAY_DEPENDENCY:
            gateways.append(dependency.name)
        elif isinstance(dependency.call, ByToken) and not by_token:
            by_token.append((dependency.name, dependency.call.authenticate))
        else:
            return None
    return _Plan(
        endpoint=route.endpoint,
        body=body,
        path=tuple(p.name for p in dependant.path_params),
        query=tuple(dependant.query_params),
        by_token=tuple(by_token),
        gateway=tuple(gateways),
        status_code=route.status_code or 200,
    )


class FastRoute(APIRoute):
    """An ``APIRoute`` served by a plan when its parameters allow one (``planned``), else as FastAPI
    serves any route. Its OpenAPI description is FastAPI's, from the same signature."""

    plan: _Plan | None = None

    @property
    def planned(self) -> bool:
        return self.plan is not None

    def get_route_handler(self) -> Handler:
        standard = super().get_route_handler()
        plan = self.plan = _plan(self)
        if plan is None:
            return standard

        async def handle(request: Request) -> Response:
            values = await plan.values(request)
            if values is None:
                return await standard(request)
            return plan.respond(await plan.endpoint(**values))

        return handle


class PlannedFirst:
    """ASGI middleware, inside tapgate's own and ahead of FastAPI's (its exception middleware, exit
    stacks and router): a plain request to a planned route of ``routers`` is served from the route's plan
    at once; every other request, and one the plan does not take, passes on to FastAPI unchanged (its
    body replayed). An error is answered by the application's own handler for it, as FastAPI's exception
    middleware would; one with no handler of its own goes on up, to the server-error handler, as it would.

    ``routers`` are included first and without dependencies of their own, so a path one of their planned
    routes matches is that route's (``tests/test_fast_routes.py`` checks FastAPI's router agrees). About
    a tenth of a call's CPU in process: the twelve layers a request passes through between tapgate's
    middleware and its route (docs/performance.md, eighth step)."""

    def __init__(self, app: ASGIApp, routers: Sequence[APIRouter]) -> None:
        self.app = app
        self.routes = [
            r for router in routers for r in router.routes if isinstance(r, FastRoute) and r.planned
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for route in self.routes:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child)  # the route, read by the metrics outside, and the path's values
                    await self._serve(route, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, route: FastRoute, scope: Scope, receive: Receive, send: Send) -> None:
        plan = route.plan
        assert plan is not None
        body = await _body(receive) if plan.body is not None else None
        request = Request(scope, _replaying(body, receive) if body is not None else receive)
        try:
            values = await plan.values(request)
            if values is None:  # not the plain shape: FastAPI answers it, as it would have
                await self.app(scope, _replaying(body, receive) if body is not None else receive, send)
                return
            response = plan.respond(await plan.endpoint(**values))
        except Exception as error:
            handler = _handler(scope, error)
            if handler is None:
                raise
            response = await handler(request, error)
        await response(scope, receive, send)


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body`` given first, whole."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _handler(scope: Scope, error: Exception) -> Callable[[Request, Exception], Awaitable[Response]] | None:
    """The application's handler for ``error``, as FastAPI's exception middleware finds it (by class,
    the nearest first); None for one only the catch-all handles (the server-error layer calls that)."""
    handlers = scope["app"].exception_handlers
    for kind in type(error).__mro__:
        if kind is Exception:
            return None
        if kind in handlers:
            handler: Callable[[Request, Exception], Awaitable[Response]] = handlers[kind]
            return handler
    return None
