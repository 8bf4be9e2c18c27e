"""A planned route (api/fast_routes.py) answers every request exactly as FastAPI's own handler answers
it: the same status, body and content type, for requests in the plain shape and for every other
(malformed, invalid, another content type, no token, a bad token). And tapgate's hot routes are planned."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Query
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.memory import MemoryStore
from tapgate.api import errors
from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.fast_routes import FastRoute
from tapgate.api.schemas import InvocationBody
from tapgate.bootstrap import build_app, build_gateway
from tapgate.config import Settings
from tapgate.domain.principals import TokenKind
from tapgate.gateway import Gateway


class Echo(BaseModel):
    thing: str
    tool: str
    user: str | None
    wait: float
    arguments: dict[str, Any]


async def echo(thing: str, body: InvocationBody, caller: Caller, gw: GatewayDep) -> Echo:
    assert isinstance(gw, Gateway)
    return Echo(thing=thing, tool=body.tool, user=caller.user_id, wait=body.wait, arguments=body.arguments)


async def read(
    thing: str,
    caller: Caller,
    wait: Annotated[float, Query(ge=0, le=60, description="Seconds to wait")] = 0,
    limit: Annotated[int | None, Query(ge=1)] = None,
) -> Echo:
    return Echo(thing=thing, tool=str(limit), user=caller.user_id, wait=wait, arguments={})


def _app(gateway: Gateway, route_class: type[APIRoute]) -> FastAPI:
    router = APIRouter(prefix="/v1/things", route_class=route_class)
    router.post("/{thing}", response_model=Echo, status_code=201)(echo)
    router.get("/{thing}", response_model=Echo)(read)
    app = FastAPI()
    app.state.gateway = gateway
    errors.install(app)
    app.include_router(router)
    return app


class Pair:
    def __init__(self, gateway: Gateway, agent: str) -> None:
        self.agent = agent
        self.planned = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=_app(gateway, FastRoute)), base_url="http://t"
        )
        self.standard = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=_app(gateway, APIRoute)), base_url="http://t"
        )


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    gateway = build_gateway(Settings(database_url="sqlite://"), store=MemoryStore(), clock=FrozenClock())
    operator = await gateway.authenticate((await gateway.create_tenant("acme")).token)
    await gateway.create_user(operator, "ana", None)
    agent = await gateway.create_token(operator, "ana", TokenKind.AGENT, agent_id="helper")
    both = Pair(gateway, agent.token)
    yield both
    await both.planned.aclose()
    await both.standard.aclose()
    await gateway.close()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_fields = st.fixed_dictionaries(
    {"tool": st.sampled_from(["device__lamp__set_light", "", "x" * 70]) | st.integers()},
    optional={
        "arguments": st.dictionaries(st.text(max_size=5), _json, max_size=3) | _json,
        "wait": st.sampled_from([0, 1.5, 300, 301, -1, "soon"]),
        "origin": st.sampled_from(["owner", "untrusted", "other"]),
        "if_offline": st.sampled_from(["wait", "fail", "never"]),
        "extra": _json,
    },
)
_body = (
    _fields.map(lambda d: json.dumps(d).encode())
    | _json.map(lambda d: json.dumps(d).encode())
    | st.sampled_from(
        [
            b"",
            b"{",
            b"{'tool': 1}",
            b"\xff\xfe",
            b"[]",
            b"null",
            b'{"tool": "a"} x',
            b'{"a": ' * 5000 + b"1" + b"}" * 5000,
        ]
    )
)
_content_type = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "text/plain", None, "application/x+json"]
)
_auth = st.sampled_from(["agent", None, "Bearer ", "Bearer not-a-token", "Basic abc", "bearer agent"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_body, content_type=_content_type, auth=_auth, thing=st.sampled_from(["lamp", "%C3%A9t%C3%A9"]))
async def test_a_planned_route_answers_as_fastapis_handler_does(
    pair: Pair, body: bytes, content_type: str | None, auth: str | None, thing: str
) -> None:
    headers = {}
    if content_type is not None:
        headers["content-type"] = content_type
    if auth == "agent":
        headers["authorization"] = f"Bearer {pair.agent}"
    elif auth == "bearer agent":
        headers["authorization"] = f"bearer {pair.agent}"
    elif auth is not None:
        headers["authorization"] = auth
    path = f"/v1/things/{thing}"
    planned = await pair.planned.post(path, content=body, headers=headers)
    standard = await pair.standard.post(path, content=body, headers=headers)
    assert (planned.status_code, planned.headers.get("content-type"), planned.content) == (
        standard.status_code,
        standard.headers.get("content-type"),
        standard.content,
    )


_query = st.lists(
    st.sampled_from(
        [
            "wait=1",
            "wait=60",
            "wait=61",
            "wait=-1",
            "wait=abc",
            "wait=",
            "wait=1.5",
            "limit=0",
            "limit=3",
            "x=1",
        ]
    ),
    max_size=3,
).map("&".join)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=_query, auth=_auth)
async def test_a_planned_routes_query_is_read_as_fastapi_reads_it(
    pair: Pair, query: str, auth: str | None
) -> None:
    headers = {"authorization": f"Bearer {pair.agent}"} if auth == "agent" else {}
    if auth not in (None, "agent", "bearer agent"):
        headers["authorization"] = auth
    path = f"/v1/things/lamp?{query}" if query else "/v1/things/lamp"
    planned = await pair.planned.get(path, headers=headers)
    standard = await pair.standard.get(path, headers=headers)
    assert (planned.status_code, planned.headers.get("content-type"), planned.content) == (
        standard.status_code,
        standard.headers.get("content-type"),
        standard.content,
    )


async def test_the_plain_shape_is_served_by_the_plan(pair: Pair) -> None:
    body = {"tool": "device__lamp__set_light", "arguments": {"on": True}, "wait": 2}
    headers = {"authorization": f"Bearer {pair.agent}"}
    answered = await pair.planned.post("/v1/things/lamp", json=body, headers=headers)
    assert answered.status_code == 201
    assert answered.json() == {
        "thing": "lamp",
        "tool": "device__lamp__set_light",
        "user": "ana",
        "wait": 2.0,
        "arguments": {"on": True},
    }


def test_tapgates_hot_routes_are_planned_and_the_others_served_by_fastapi(tmp_path: Any) -> None:
    settings_ = Settings(
        database_url=f"sqlite:///{tmp_path / 'x.db'}", device_channel_enabled=True, device_sms_enabled=True
    )
    build_app(settings_)
    from tapgate.api.routes import device, invocations

    planned = {
        (method, route.path)
        for route in [*invocations.router.routes, *device.router.routes]
        if isinstance(route, FastRoute) and route.planned
        for method in route.methods
    }
    assert planned == {
        ("POST", "/v1/invocations"),
        ("GET", "/v1/invocations/{invocation_id}"),
        ("GET", "/v1/device/invocations"),
        ("POST", "/v1/device/invocations/{invocation_id}/result"),
        ("POST", "/v1/device/ingest"),
        ("POST", "/v1/device/heartbeat"),
        ("PUT", "/v1/device/capabilities"),
    }
