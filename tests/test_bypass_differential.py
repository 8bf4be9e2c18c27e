"""Each faster path tapgate keeps beside the framework's (src/tapgate/api/fast/) answers as the server
without it answers: two real `tapgate serve` processes, one with every bypass and one without the one
under test (TAPGATE_BYPASS_OFF), start from copies of one database; the same generated request (valid,
invalid, oversized, a repeated key, no or a wrong token), split at the same random byte boundaries, is
sent to both over a plain socket, and both give the same status, content type and body, and leave the
same calls behind in their databases. A device link sends the same generated frames to both and receives
the same frames, closes alike, and its call ends alike."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import secrets
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
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tapgate.adapters.store.migrate import migrate
from tapgate.bootstrap import bypasses_off
from tapgate.domain.errors import ConfigurationError
from tests.conftest import blocking
from tests.live import Server, new_tenant, write_config
from tests.test_fuzz_link import TOOL, _frames, _Oversized, _wire
from tests.world import LAMP, bearer, device_body

MAX_BODY = 2048  # both servers' max_body_bytes: an oversized body is cheap to send
CALL = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}}
# The bypasses that serve requests over HTTP, and those that serve the device link.
HTTP_BYPASSES = ["ahead", "light_http", "raw_sql"]
LINK_BYPASSES = ["link", "light_ws", "raw_sql"]
SECONDS = 30  # a bound on each wait for a gateway, far above what it takes on a busy machine


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


@pytest.fixture(scope="module")
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
        url = f"sqlite:///{database}"
        config = write_config(folder / name, url, max_body_bytes=MAX_BODY, invocation_timeout_seconds=600)
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
_CALL_ID = re.compile(r"inv_[0-9a-f]{16,}")


def _comparable(value: Any) -> Any:
    """``value`` without what differs between two servers (a new call's id and its times)."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k not in _NEW}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, str):
        return _CALL_ID.sub("inv_…", value)
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
@pytest.mark.parametrize("twins", HTTP_BYPASSES, indirect=True)
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
@pytest.mark.parametrize("twins", HTTP_BYPASSES, indirect=True)
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
@pytest.mark.parametrize("twins", HTTP_BYPASSES, indirect=True)
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
@pytest.mark.parametrize("twins", HTTP_BYPASSES, indirect=True)
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


def _link(twin: Twin, auth: str | None, frames: list[str | bytes | _Oversized], call: str, agent: str) -> Any:
    """A call to the lamp, then a link opened with ``auth`` that sends ``frames``: what the link received
    (every frame, in no particular order, and how it closed), and the call's state after the link's
    answer, if it got the call."""
    url = twin.server.url.replace("http", "ws") + "/v1/device/connect"
    headers = {"Authorization": auth} if auth else {}
    got: list[Any] = []
    oversized = any(isinstance(frame, _Oversized) for frame in frames)
    with httpx.Client(base_url=twin.server.url, timeout=SECONDS) as http:
        body = {"tool": TOOL, "arguments": {"on": True}, "invocation_id": call}
        made = http.post("/v1/invocations", json=body, headers=bearer(agent))
        assert made.status_code == 200, made.text
        try:
            with connect(url, additional_headers=headers, compression=None, open_timeout=SECONDS) as link:
                for frame in frames:
                    link.send(_wire(frame))
                while True:  # each recv is bounded
                    frame = json.loads(link.recv(timeout=SECONDS))
                    got.append(_comparable(frame))
                    if frame.get("type") != "device:invoke":
                        continue
                    answer = "done" if frame.get("callId") == call else "failed"
                    link.send(
                        json.dumps({"type": "device:result", "callId": frame["callId"], "status": answer})
                    )
                    if answer == "done":
                        break
                while True:  # up to the call's device:ack: the earlier answers' acks come before it
                    frame = json.loads(link.recv(timeout=SECONDS))
                    got.append(_comparable(frame))
                    if frame.get("type") == "device:ack" and frame.get("callId") == call:
                        break
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            # A frame too large is closed unread: a device still sending it may see TCP's reset instead.
            got.append("closed: too large" if oversized and code in (None, 1009) else f"closed: {code}")
        except InvalidStatus as refused:
            got.append(f"refused: {refused.response.status_code}")
        read = http.get(f"/v1/invocations/{call}", headers=bearer(agent))
    assert read.status_code == 200, read.text
    return sorted(json.dumps(frame, sort_keys=True) for frame in got), _comparable(read.json())


_link_auth = st.sampled_from(["lamp", "agent", None, "Bearer tgd_nope"])


@pytest.mark.parametrize("twins", LINK_BYPASSES, indirect=True)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# A frame over the limit closes the link unread, at a moment that races the device's own sends: on a
# server with each bypass it is closed alike (tests/test_bounded_resources.py, tests/test_fuzz_link.py).
@given(auth=_link_auth, frames=st.lists(_frames.filter(lambda f: not isinstance(f, _Oversized)), max_size=5))
@example(auth="lamp", frames=[])
def test_a_device_link_is_served_alike_with_and_without_the_bypass(
    twins: Twins, auth: str | None, frames: list[str | bytes | _Oversized]
) -> None:
    token = twins.tokens.get(auth or "")
    header = f"Bearer {token}" if token else auth
    call = f"dx-{secrets.token_hex(8)}"
    seen = [_link(side, header, frames, call, twins.tokens["agent"]) for side in twins.sides]
    assert seen[0] == seen[1]
    assert _calls(twins.sides[0].database) == _calls(twins.sides[1].database)


def test_an_unknown_bypass_name_is_refused_with_the_names_tapgate_knows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TAPGATE_BYPASS_OFF", "ahead, warp")
    with pytest.raises(ConfigurationError, match="names warp, which tapgate does not know; use some of link"):
        bypasses_off()
    monkeypatch.setenv("TAPGATE_BYPASS_OFF", "ahead, light_ws")
    assert bypasses_off() == {"ahead", "light_ws"}
