"""Each faster path tapgate keeps beside the framework's (src/tapgate/api/fast/) answers as the server
without it answers: two real `tapgate serve` processes, one with every bypass and one without the one
under test (TAPGATE_BYPASS_OFF), start from copies of one database; the same generated request (valid,
invalid, oversized, a repeated key, no or a wrong token), split at the same random byte boundaries, is
sent to both over a plain socket, and both give the same status, content type and body, and leave the
same calls behind in their databases."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import socket
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tapgate.adapters.store.migrate import migrate
from tests.conftest import blocking
from tests.live import Server, new_tenant, write_config
from tests.world import LAMP, bearer, device_body

MAX_BODY = 2048  # both servers' max_body_bytes: an oversized body is cheap to send
CALL = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}}
# The bypasses a server can leave out whose answers travel over HTTP (the other ones are the device link's).
HTTP_BYPASSES = ["raw_sql"]


@dataclass
class Twin:
    server: Server
    database: Path
    calls: list[str]  # the ids of the calls made on it so far, in order


@dataclass
class Twins:
    sides: tuple[Twin, Twin]  # with every bypass, without the one under test
    tokens: dict[str, str]  # agent, person, lamp: the same on both (one database, copied)


def _seed(folder: Path, url: str) -> dict[str, str]:
    """A person with an agent and a lamp that may set its light, made through a gateway of its own."""
    folder.mkdir()
    server = Server(write_config(folder, url, max_body_bytes=MAX_BODY)).start()
    try:
        operator = blocking(new_tenant(url))
        with httpx.Client(base_url=server.url, timeout=30) as client:
            made = client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator))
            assert made.status_code == 201, made.text
            person = client.post("/v1/users/ana/tokens", json={"kind": "user"}, headers=bearer(operator))
            agent = client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=bearer(operator))
            body = device_body("desk-lamp", [LAMP], grants=["set_light"])
            lamp = client.post("/v1/users/ana/devices", json=body, headers=bearer(operator))
            assert lamp.status_code == 201, lamp.text
    finally:
        server.stop()
    return {
        "agent": agent.json()["token"],
        "person": person.json()["token"],
        "lamp": lamp.json()["device_token"],
    }


@pytest.fixture(scope="module", params=HTTP_BYPASSES)
def twins(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twins]:
    folder = tmp_path_factory.mktemp(f"twins-{request.param}")
    first = folder / "with.db"
    blocking(migrate(f"sqlite:///{first}"))
    tokens = _seed(folder / "seed", f"sqlite:///{first}")
    second = folder / "without.db"
    with (
        contextlib.closing(sqlite3.connect(first)) as source,
        contextlib.closing(sqlite3.connect(second)) as copy,
    ):
        source.backup(copy)
    sides = []
    for name, database, env in (
        ("with", first, {}),
        ("without", second, {"TAPGATE_BYPASS_OFF": request.param}),
    ):
        (folder / name).mkdir()
        config = write_config(folder / name, f"sqlite:///{database}", max_body_bytes=MAX_BODY)
        server = Server(config, env=env).start()
        sides.append(Twin(server, database, []))
    try:
        yield Twins((sides[0], sides[1]), tokens)
    finally:
        for side in sides:
            side.server.stop()


def _whole(answer: bytes) -> bool:
    head, found, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return bool(found and length and len(body) >= int(length.group(1)))


async def _send(server: Server, request: bytes, cuts: list[int]) -> tuple[int, str, Any]:
    """``request`` sent in pieces cut at ``cuts`` on a connection of its own: the answer's status,
    content type and body (JSON where it is)."""
    loop = asyncio.get_running_loop()
    edges = [0, *sorted({c % len(request) for c in cuts} - {0}), len(request)]
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.setblocking(False)
        with contextlib.suppress(ConnectionError):
            for start, end in itertools.pairwise(edges):
                await asyncio.wait_for(loop.sock_sendall(sock, request[start:end]), timeout=10)
        answer = b""
        with contextlib.suppress(ConnectionError):
            while not _whole(answer) and (chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), 30)):
                answer += chunk
    assert _whole(answer), answer[:300]
    head, _, body = answer.partition(b"\r\n\r\n")
    kind = re.search(rb"(?im)^content-type:\s*([^\r\n]*)", head)
    data: Any = body
    with contextlib.suppress(ValueError):
        data = json.loads(body)
    return int(head.split(b" ", 2)[1]), kind.group(1).decode() if kind else "", data


def _request(method: str, path: str, body: bytes | None, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


_NEW = ("id", "created_at", "expires_at", "resolved_at", "delivered_at", "receipt")


def _comparable(value: Any) -> Any:
    """``value`` without what differs between two servers (a new call's id and its times)."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k not in _NEW}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def _calls(database: Path) -> list[tuple[Any, ...]]:
    """The calls a server's database holds, in order, without their ids and times."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        columns = "tool, arguments, status, message, reason, late_status"
        return db.execute(f"SELECT {columns} FROM invocations ORDER BY created_at").fetchall()


async def _both(twins: Twins, build: Any, cuts: list[int]) -> None:
    """The request ``build(side)`` makes, sent to both servers: the same answer, the same calls after."""
    answers = []
    for side in twins.sides:
        status, kind, body = await _send(side.server, build(side), cuts)
        if status == 200 and isinstance(body, dict) and str(body.get("id", "")).startswith("inv_"):
            side.calls.append(body["id"])
        answers.append((status, kind, _comparable(body)))
    assert answers[0] == answers[1]
    assert _calls(twins.sides[0].database) == _calls(twins.sides[1].database)


_auth = st.sampled_from(["agent", "person", "lamp", None, "Bearer ", "Bearer tga_nope", "Basic abc"])
_call = st.fixed_dictionaries(
    {"tool": st.sampled_from(["device__desk_lamp__set_light", "device__desk_lamp__nope", "", 5])},
    optional={
        "arguments": st.sampled_from([{"on": True}, {"on": "yes"}, {}, [], {"on": True, "scene": "hot"}]),
        "wait": st.sampled_from([0, -1, 301, "soon"]),
        "extra": st.just(1),
    },
).map(lambda d: json.dumps(d).encode())
REPEATED = b'{"tool": "device__desk_lamp__set_light", "arguments": {"on": true, "on": false}}'
OVER = b'{"tool": "device__desk_lamp__set_light", "arguments": {"on": true, "x": "' + b"x" * MAX_BODY + b'"}}'
_body = _call | st.sampled_from([b"", b"{", b"[]", b"null", REPEATED, OVER])
_content_type = st.sampled_from(["application/json", "text/plain", None])
_cuts = st.lists(st.integers(1, 2**16), max_size=5)


def _headers(twins: Twins, auth: str | None, content_type: str | None = None) -> dict[str, str]:
    headers = {"Content-Type": content_type} if content_type else {}
    token = twins.tokens.get(auth or "")
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    elif auth is not None:
        headers["Authorization"] = auth
    return headers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_body, auth=_auth, content_type=_content_type, cuts=_cuts)
@example(body=json.dumps(CALL).encode(), auth="agent", content_type="application/json", cuts=[])
@example(body=OVER, auth="agent", content_type="application/json", cuts=[7, 300])
@example(body=REPEATED, auth="agent", content_type="application/json", cuts=[])
async def test_an_agents_call_is_answered_alike_with_and_without_the_bypass(
    twins: Twins, body: bytes, auth: str | None, content_type: str | None, cuts: list[int]
) -> None:
    headers = _headers(twins, auth, content_type)
    await _both(twins, lambda _: _request("POST", "/v1/invocations", body, headers), cuts)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    auth=_auth,
    known=st.booleans(),
    wait=st.sampled_from([None, "0", "0.01", "abc", "-1", "301"]),
    cuts=_cuts,
)
async def test_an_agents_read_is_answered_alike_with_and_without_the_bypass(
    twins: Twins, auth: str | None, known: bool, wait: str | None, cuts: list[int]
) -> None:
    headers = _headers(twins, auth)
    query = f"?wait={wait}" if wait is not None else ""

    def read(side: Twin) -> bytes:
        target = side.calls[-1] if known and side.calls else "inv_nope"
        return _request("GET", f"/v1/invocations/{target}{query}", None, headers)

    await _both(twins, read, cuts)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(auth=_auth, wait=st.sampled_from([None, "0", "abc", "-1", "61"]), cuts=_cuts)
async def test_a_devices_long_poll_is_answered_alike_with_and_without_the_bypass(
    twins: Twins, auth: str | None, wait: str | None, cuts: list[int]
) -> None:
    headers = _headers(twins, auth)
    query = f"?wait={wait}" if wait is not None else ""
    await _both(twins, lambda _: _request("GET", f"/v1/device/invocations{query}", None, headers), cuts)


_answer = st.fixed_dictionaries(
    {"status": st.sampled_from(["done", "declined", "maybe", 3])},
    optional={"message": st.sampled_from(["ok", "", "x" * 3000]), "extra": st.just(1)},
).map(lambda d: json.dumps(d).encode())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=_answer | st.sampled_from([b"", b"{", b'{"status": "done", "status": "declined"}']),
    auth=_auth,
    cuts=_cuts,
)
@example(body=b'{"status": "done"}', auth="lamp", cuts=[])
async def test_a_devices_answer_is_answered_alike_with_and_without_the_bypass(
    twins: Twins, body: bytes, auth: str | None, cuts: list[int]
) -> None:
    call = json.dumps(CALL).encode()
    agent = _headers(twins, "agent", "application/json")
    await _both(twins, lambda _: _request("POST", "/v1/invocations", call, agent), [])
    headers = _headers(twins, auth, "application/json")

    def answer(side: Twin) -> bytes:
        return _request("POST", f"/v1/device/invocations/{side.calls[-1]}/result", body, headers)

    await _both(twins, answer, cuts)
    await _both(twins, answer, cuts)  # again: 409 with the first answer, where the first was taken
