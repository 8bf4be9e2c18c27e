"""How a hot route (an agent's call and its read, a device's long-poll, answer and forwarded message) is
served without FastAPI's per-request machinery, with its behaviour (``ahead.py`` serves by it).

FastAPI resolves a route's parameters for every request with general code: the dependency graph, the
body's content type, a second validation of the returned model. For a route whose parameters are only a
JSON body model, path strings, query parameters and tapgate's own dependencies (the gateway, a caller by
bearer token), ``plan_for`` makes that work once, when the app is built. A request in the plain shape (a
JSON object that validates, sent as ``application/json`` with a bearer token; query parameters that
FastAPI's own field validation accepts) is read, validated with the same model and handed to the same
endpoint, whose returned model is written as FastAPI writes it. Anything else (a malformed or invalid
body or query, another content type, no token) is left to FastAPI, so every error is the one FastAPI
gives. A route with anything more (a header or cookie parameter, another dependency) has no plan.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import fastapi.routing
from fastapi import Request, Response
from fastapi.dependencies.utils import request_params_to_args
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from tapgate.api.auth import GATEWAY_DEPENDENCY, ByToken, bearer_token, gateway
from tapgate.gateway import Gateway


@dataclass(frozen=True)
class Plan:
    endpoint: Callable[..., Awaitable[Any]]
    body: tuple[str, type[BaseModel]] | None  # the body parameter's name and model
    path: tuple[str, ...]  # path parameters, strings
    query: tuple[Any, ...]  # query parameters, as FastAPI's fields (it validates them)
    by_token: tuple[tuple[str, Callable[[Gateway, str], Awaitable[Any]]], ...]  # the caller's parameter
    gateway: tuple[str, ...]  # parameters that take the gateway
    status_code: int

    async def shaped(self, request: Request, data: Any = None) -> dict[str, Any] | None:
        """The endpoint's arguments but its caller, or None when the request is not in the plain shape
        (nothing is authenticated yet). ``data``: the body, parsed already."""
        values: dict[str, Any] = {}
        if self.body is not None:
            if request.headers.get("content-type") != "application/json":
                return None
            if data is None:
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
        if self.by_token and bearer_token(request) is None:
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
        return values

    async def authenticated(self, request: Request, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with the caller, authenticated by its token (``shaped`` found one): past this point
        the request is served by the plan. Raises what the authentication raises."""
        for name, authenticate in self.by_token:
            token = bearer_token(request)
            assert token is not None
            values[name] = await authenticate(gateway(request), token)
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


def plan_for(route: APIRoute) -> Plan | None:
    """How ``route`` is served without FastAPI's handler, or None when its parameters allow no plan."""
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
    return Plan(
        endpoint=route.endpoint,
        body=body,
        path=tuple(p.name for p in dependant.path_params),
        query=tuple(dependant.query_params),
        by_token=tuple(by_token),
        gateway=tuple(gateways),
        status_code=route.status_code or 200,
    )
