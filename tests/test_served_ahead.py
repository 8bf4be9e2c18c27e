"""A request to a planned route (an agent's call and its read, a device's long-poll, answer, message,
heartbeat and capabilities) is served ahead of the framework (api/fast/ahead.py) exactly as the whole stack
serves it: the same status, content type and body, the same request metrics, for requests in the plain
shape and for every other (a malformed or invalid body or query, a repeated key, a body over the limit or
of no announced length, no token, a bad token, a token of the wrong kind). And the plain ones really pass
through none of the stack's layers."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.types import ASGIApp, Receive, Scope, Send

from tapgate.adapters.clock import FrozenClock
from tapgate.api.fast.first import FirstApp
from tapgate.bootstrap import build_app
from tapgate.config import Settings
from tests.world import LAMP, World, bearer, device_body

MAX_BODY = 2048
CALL = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}}


class Spy:
    """An ASGI middleware that notes the path of every HTTP request the stack serves."""

    def __init__(self, app: ASGIApp, seen: list[str]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append(scope["path"])
        await self.app(scope, receive, send)


@dataclass
class Home:
    client: httpx.AsyncClient
    app: FirstApp
    seen: list[str]
    agent: str
    user: str
    lamp: str
    ahead: Any

    def requests(self, method: str, route: str, status: int) -> float:
        labels = {"method": method, "route": route, "status": str(status)}
        return self.app.state.metrics.get_sample_value("tapgate_http_requests_total", labels) or 0.0


@contextlib.asynccontextmanager
async def _home(sqlite_url: str) -> AsyncIterator[Home]:
    options = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        max_body_bytes=MAX_BODY,
    )
    app = build_app(options, clock=FrozenClock())
    assert isinstance(app, FirstApp) and app.ahead is not None
    seen: list[str] = []
    app.add_middleware(Spy, seen=seen)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://tapgate.test") as client,
    ):
        client.app = app  # type: ignore[attr-defined]
        world = await World(client).start()
        user = await world.person("ana")
        agent = await world.agent("ana")
        lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP]))
        r = await client.put(
            "/v1/users/ana/devices/desk-lamp/grants", json={"grants": ["set_light"]}, headers=bearer(user)
        )
        assert r.status_code in (200, 204), r.text
        yield Home(client, app, seen, agent, user, lamp, app.ahead)


@pytest.fixture
async def home(sqlite_url: str) -> AsyncIterator[Home]:
    async with _home(sqlite_url) as made:
        yield made


def _comparable(response: httpx.Response) -> tuple[int, str | None, Any]:
    """A response's status, content type and body, with what differs between two calls (a new call's
    id and the times it was made at) left out."""
    body: Any = response.content
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict):
            # A new message's receipt is its own too.
            body = {k: v for k, v in body.items() if k not in ("id", "created_at", "expires_at", "receipt")}
            if isinstance(body.get("first"), dict):  # a second answer learns the first, by its call's id
                body["first"] = {k: v for k, v in body["first"].items() if k != "id"}
    return response.status_code, response.headers.get("content-type"), body


_auth = st.sampled_from(["agent", "user", "lamp", None, "Bearer ", "Bearer tga_nope", "Basic abc"])
# Above the long-poll's 60 s and the read's 300 s: refused at once (a read may wait 61 s, so no such case).
_wait = st.sampled_from([None, "0", "0.01", "abc", "-1", "301", ""])
_call = st.fixed_dictionaries(
    {"tool": st.sampled_from(["device__desk_lamp__set_light", "device__desk_lamp__nope", "", 5])},
    optional={
        "arguments": st.sampled_from([{"on": True}, {"on": "yes"}, {}, [], {"on": True, "scene": "hot"}]),
        "wait": st.sampled_from([0, 0.01, -1, 301, "soon"]),
        "session_id": st.sampled_from(["s1", ""]),
        "extra": st.just(1),
    },
).map(lambda d: json.dumps(d).encode())
REPEATED = b'{"tool": "device__desk_lamp__set_light", "arguments": {"on": true, "on": false}}'
OVER = (
    b'{"tool": "device__desk_lamp__set_light", "arguments": {"on": true, "scene": "'
    + b"x" * MAX_BODY
    + b'"}}'
)
_body = _call | st.sampled_from(
    [b"", b"{", b"[]", b"null", b'{"tool": "device__desk_lamp__set_light", "tool": "x"}', REPEATED, OVER]
)
_content_type = st.sampled_from(["application/json", "text/plain", None])


def _headers(home: Home, auth: str | None, content_type: str | None = None) -> dict[str, str]:
    headers = {"content-type": content_type} if content_type else {}
    token = {"agent": home.agent, "user": home.user, "lamp": home.lamp}.get(auth or "")
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    elif auth is not None:
        headers["authorization"] = auth
    return headers


def _counted(home: Home) -> dict[tuple[str, ...], float]:
    """Every request counted in the metrics so far, by method, route and status."""
    counts: dict[tuple[str, ...], float] = {}
    for metric in home.app.state.metrics.collect():
        for sample in metric.samples:
            if sample.name == "tapgate_http_requests_total":
                labels = sample.labels
                counts[(labels["method"], labels["route"], labels["status"])] = sample.value
    return counts


async def _both(home: Home, request: Any) -> None:
    """``request(0)`` served ahead of the framework and ``request(1)`` by the whole stack (the same
    request, or its twin where it acts on something of its own): the same answer, and the same count in
    the request metrics (one request, under the same route and status)."""
    answers = []
    for side, ahead in enumerate((home.ahead, None)):
        home.app.ahead = ahead
        before = _counted(home)
        response = await request(side)
        after = _counted(home)
        counted = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
        answers.append((_comparable(response), counted))
    home.app.ahead = home.ahead
    assert answers[0] == answers[1]
    assert sum(answers[0][1].values()) == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(wait=_wait | st.just("61"), auth=_auth)
async def test_a_long_poll_is_answered_as_the_whole_stack_answers_it(
    home: Home, wait: str | None, auth: str | None
) -> None:
    path = "/v1/device/invocations" + (f"?wait={wait}" if wait is not None else "")
    await _both(home, lambda _: home.client.get(path, headers=_headers(home, auth)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(wait=_wait, auth=_auth, known=st.booleans())
async def test_an_agents_read_that_waits_is_answered_as_the_whole_stack_answers_it(
    home: Home, wait: str | None, auth: str | None, known: bool
) -> None:
    made = await home.client.post(
        "/v1/invocations",
        json={"tool": "device__desk_lamp__set_light", "arguments": {"on": True}},
        headers=bearer(home.agent),
    )
    assert made.status_code == 200, made.text
    target = made.json()["id"] if known else "inv_nope"
    path = f"/v1/invocations/{target}" + (f"?wait={wait}" if wait is not None else "")
    await _both(home, lambda _: home.client.get(path, headers=_headers(home, auth)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_body, auth=_auth, content_type=_content_type)
@example(body=REPEATED, auth="agent", content_type="application/json")
@example(body=OVER, auth="agent", content_type="application/json")
@example(
    body=b'{"tool": "device__desk_lamp__set_light", "arguments": {"on": 1}}', auth="agent", content_type=None
)
async def test_an_agents_call_is_answered_as_the_whole_stack_answers_it(
    home: Home, body: bytes, auth: str | None, content_type: str | None
) -> None:
    headers = _headers(home, auth, content_type)
    await _both(home, lambda _: home.client.post("/v1/invocations", content=body, headers=headers))


_answer = st.fixed_dictionaries(
    {"status": st.sampled_from(["done", "declined", "sent", "maybe", 3])},
    optional={"message": st.sampled_from(["ok", "", "x" * 5000, None]), "extra": st.just(1)},
).map(lambda d: json.dumps(d).encode())


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_answer | st.sampled_from([b"", b"{", b'{"status": "done", "status": "failed"}']), auth=_auth)
@example(body=b'{"status": "done"}', auth="lamp")
@example(body=b'{"status": "done", "status": "failed"}', auth="lamp")
async def test_a_devices_answer_is_answered_as_the_whole_stack_answers_it(
    home: Home, body: bytes, auth: str | None
) -> None:
    calls = []
    for _ in range(2):  # one call for each side to answer
        made = await home.client.post("/v1/invocations", json=CALL, headers=bearer(home.agent))
        assert made.status_code == 200, made.text
        calls.append(made.json()["id"])
    headers = _headers(home, auth, "application/json")

    async def answer(side: int) -> httpx.Response:
        path = f"/v1/device/invocations/{calls[side]}/result"
        return await home.client.post(path, content=body, headers=headers)

    await _both(home, answer)
    await _both(home, answer)  # answered again: 409 with the first answer, where the first was taken


_message = st.fixed_dictionaries(
    {
        "channel": st.sampled_from(["sms", "mail"]),
        "sender": st.sampled_from(["+15550100", "x" * 70]),
        "body": st.sampled_from(["hello", ""]),
        "received_at": st.sampled_from(["2026-01-01T00:00:00+00:00", "yesterday"]),
    }
).map(lambda d: json.dumps(d).encode())


_sent = itertools.count()


def _new(body: bytes) -> bytes:
    """The message with a text of its own, where it is a message: each side's is new (the same message
    sent twice would be new to the first side and a duplicate to the second)."""
    with contextlib.suppress(ValueError):
        message = json.loads(body)
        if isinstance(message, dict) and isinstance(message.get("body"), str):
            return json.dumps(message | {"body": f"{message['body']} ({next(_sent)})"}).encode()
    return body


_HELLO = {"channel": "sms", "sender": "+15550100", "body": "hi", "received_at": "2026-01-01T00:00:00+00:00"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_message | st.sampled_from([b"[]", b"{"]), auth=_auth)
@example(body=json.dumps(_HELLO).encode(), auth="lamp")  # stored: a message the device may send
async def test_a_devices_message_and_heartbeat_are_answered_as_the_whole_stack_answers_them(
    home: Home, body: bytes, auth: str | None
) -> None:
    headers = _headers(home, auth, "application/json")
    await _both(home, lambda _: home.client.post("/v1/device/ingest", content=_new(body), headers=headers))
    await _both(home, lambda _: home.client.post("/v1/device/heartbeat", headers=_headers(home, auth)))


async def test_a_body_of_no_announced_length_is_refused_by_the_whole_stack(home: Home) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"tool": "device__desk_lamp__set_light", '
        yield b'"arguments": {"on": true}}'

    headers = _headers(home, "agent", "application/json")
    home.seen.clear()
    r = await home.client.post("/v1/invocations", content=chunks(), headers=headers)
    assert r.status_code == 200, r.text
    assert home.seen == ["/v1/invocations"]  # streamed: BodyLimit reads it, in the stack


async def test_plain_requests_pass_through_none_of_the_stacks_layers(home: Home) -> None:
    home.seen.clear()
    call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}}
    made = await home.client.post("/v1/invocations", json=call, headers=bearer(home.agent))
    assert made.status_code == 200, made.text
    polled = await home.client.get("/v1/device/invocations?wait=0.01", headers=bearer(home.lamp))
    assert [i["id"] for i in polled.json()["invocations"]] == [made.json()["id"]]
    read = await home.client.get(f"/v1/invocations/{made.json()['id']}?wait=0", headers=bearer(home.agent))
    assert read.status_code == 200, read.text
    path = f"/v1/device/invocations/{made.json()['id']}/result"
    answered = await home.client.post(path, json={"status": "done"}, headers=bearer(home.lamp))
    assert answered.status_code == 200, answered.text
    beat = await home.client.post("/v1/device/heartbeat", headers=bearer(home.lamp))
    assert beat.status_code == 204, beat.text
    assert home.seen == []
    assert home.requests("POST", "/v1/invocations", 200) == 1
    assert home.requests("GET", "/v1/device/invocations", 200) == 1
    # Not in the plain shape: the stack serves it, and answers as always.
    bad = await home.client.get("/v1/device/invocations?wait=abc", headers=bearer(home.lamp))
    assert bad.status_code == 422
    repeated = await home.client.post(
        "/v1/invocations",
        content=b'{"tool": "a", "tool": "b"}',
        headers={"content-type": "application/json", **bearer(home.agent)},
    )
    assert repeated.status_code == 400 and "repeats the key 'tool'" in repeated.json()["error"]["message"]
    assert home.seen == ["/v1/device/invocations", "/v1/invocations"]
