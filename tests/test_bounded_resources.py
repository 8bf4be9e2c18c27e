"""Bounded resources on a real `tapgate serve` (DESIGN §15): request heads are bounded in size and time,
request bodies in time, the connections of a process in number, WebSocket frames in size (before the link
authenticates too), and one token holds at most max_streams_per_credential streams at once."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import websockets
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tapgate.adapters.store.migrate import migrate
from tests.conftest import blocking
from tests.live import Server, new_tenant, write_config
from tests.world import LAMP, bearer, device_body

HEAD_SECONDS = 1.0  # the test server's header_timeout_seconds (the default is 10)
BODY_SECONDS = 1.0  # the test server's body_timeout_seconds (the default is 30)
STREAMS = 3  # the test server's max_streams_per_credential (the default is 8)
CONNECTIONS = 3  # max_connections of the capped server (the default is 10,000)


@dataclass
class Live:
    server: Server
    url: str


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("bounded")
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    config = write_config(
        folder,
        url,
        header_timeout_seconds=HEAD_SECONDS,
        body_timeout_seconds=BODY_SECONDS,
        max_streams_per_credential=STREAMS,
    )
    server = Server(config).start()
    try:
        yield Live(server, url)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("capped")
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    server = Server(write_config(folder, url, max_connections=CONNECTIONS)).start()
    try:
        yield Live(server, url)
    finally:
        server.stop()


@dataclass
class Home:
    operator: str
    agent: str
    lamp: str


@pytest.fixture
async def home(live: Live) -> Home:
    operator = await new_tenant(live.url)
    async with httpx.AsyncClient(base_url=live.server.url, timeout=30) as client:
        assert (
            await client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator))
        ).status_code == 201
        agent = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=bearer(operator))
        body = device_body("desk-lamp", [LAMP], grants=["set_light"])
        lamp = await client.post("/v1/users/ana/devices", json=body, headers=bearer(operator))
    return Home(operator, agent.json()["token"], lamp.json()["device_token"])


async def _raw(live: Live) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", live.server.port)


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before it closed the connection (a reset counts as a close)."""
    chunks = []
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_a_header_of_eight_megabytes_is_refused_before_it_is_read(live: Live) -> None:
    reader, writer = await _raw(live)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
    sent, refused = 0, False
    try:
        while sent < 8 * 1024 * 1024:
            writer.write(b"a" * 65536)
            await asyncio.wait_for(writer.drain(), timeout=10)
            sent += 65536
    except (ConnectionError, TimeoutError):
        refused = True
    answer = await asyncio.wait_for(_answer(reader), timeout=10)
    writer.close()
    assert refused or answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert sent < 8 * 1024 * 1024 or answer.startswith(b"HTTP/1.1 431")
    assert b"200 OK" not in answer


async def test_a_header_just_over_sixteen_kibibytes_gets_431_in_the_error_shape(live: Live) -> None:
    reader, writer = await _raw(live)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 16_400 + b"\r\n\r\n")
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    answer = await asyncio.wait_for(_answer(reader), timeout=10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), answer[:200]
    assert json.loads(body)["error"]["code"] == "too_large"
    async with httpx.AsyncClient(base_url=live.server.url) as client:
        small = await client.get("/healthz", headers={"X-Fine": "a" * 8000})
        assert small.status_code == 200  # a large but legal head still passes


async def test_requests_sent_together_on_one_connection_are_each_answered_in_order(live: Live) -> None:
    reader, writer = await _raw(live)
    paths = [b"/healthz", b"/v1/nope", b"/readyz"]
    heads = [b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % path for path in paths]
    writer.write(b"\r\n".join(heads) + b"Connection: close\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(_answer(reader), timeout=30)
    writer.close()
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert statuses == [b"200", b"404", b"200"], answer[:400]


async def test_a_half_sent_header_is_closed_after_the_header_timeout(live: Live) -> None:
    reader, writer = await _raw(live)
    loop = asyncio.get_running_loop()
    started = loop.time()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
    await writer.drain()
    answer = await asyncio.wait_for(_answer(reader), timeout=HEAD_SECONDS + 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert loop.time() - started >= HEAD_SECONDS * 0.9


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(live: Live) -> None:
    reader, writer = await _raw(live)
    answer = await asyncio.wait_for(_answer(reader), timeout=HEAD_SECONDS + 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


@contextlib.asynccontextmanager
async def _event_stream(client: httpx.AsyncClient, token: str) -> AsyncIterator[httpx.Response]:
    async with client.stream("GET", "/v1/events", headers=bearer(token)) as r:
        if r.status_code != 200:
            await r.aread()
            yield r
            return
        chunks = r.aiter_raw()  # kept: a dropped iterator closes the stream when it is collected
        await chunks.__anext__()  # the stream is open on the server
        yield r


async def test_a_token_holds_at_most_its_streams_and_the_next_gets_429_with_a_reason(
    live: Live, home: Home
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(httpx.AsyncClient(base_url=live.server.url, timeout=30))
        for _ in range(STREAMS):
            r = await stack.enter_async_context(_event_stream(client, home.agent))
            assert r.status_code == 200
        async with _event_stream(client, home.agent) as r:
            assert r.status_code == 429
            assert "open streams" in r.json()["error"]["message"] and r.headers["Retry-After"]
        poll = await client.get("/v1/invocations/nope?wait=5", headers=bearer(home.agent))
        assert poll.status_code == 429  # long-polls count with event streams
        assert (await client.get("/v1/tools", headers=bearer(home.agent))).status_code == 200  # not a stream
    async with (
        httpx.AsyncClient(base_url=live.server.url, timeout=30) as client,
        _event_stream(client, home.agent) as r,
    ):
        assert r.status_code == 200  # closing them gave the slots back


async def test_a_device_holds_at_most_its_streams_across_links_and_long_polls(live: Live, home: Home) -> None:
    ws_url = live.server.url.replace("http", "ws") + "/v1/device/connect"
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(STREAMS):
            await stack.enter_async_context(
                websockets.connect(ws_url, additional_headers=bearer(home.lamp), compression=None)
            )
        with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
            async with websockets.connect(ws_url, additional_headers=bearer(home.lamp), compression=None):
                pass
        assert refused.value.response.status_code == 429
        async with httpx.AsyncClient(base_url=live.server.url, timeout=30) as client:
            poll = await client.get("/v1/device/invocations?wait=5", headers=bearer(home.lamp))
            assert poll.status_code == 429


async def test_a_ten_mebibyte_frame_is_closed_without_being_read(live: Live, home: Home) -> None:
    ws_url = live.server.url.replace("http", "ws") + "/v1/device/connect"
    for headers in (bearer(home.lamp), {}):  # an authenticated link, and one that has not said who it is
        async with websockets.connect(
            ws_url, additional_headers=headers, compression=None, max_size=None
        ) as link:
            with contextlib.suppress(websockets.exceptions.ConnectionClosed):
                await link.send("x" * (10 * 1024 * 1024))
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                await _drain(link)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # message too big


async def _drain(link: websockets.ClientConnection) -> None:
    """Read frames until the server closes the link (bounded per frame)."""
    while True:
        await asyncio.wait_for(link.recv(), timeout=10)


def test_the_limits_are_logged_at_start(live: Live) -> None:
    [line] = [json.loads(x) for x in live.server.logs().splitlines() if '"limits"' in x]
    assert line["max_header_bytes"] == 16_384 and line["header_timeout_seconds"] == HEAD_SECONDS
    assert line["ws_max_frame_bytes"] == 65_536 and line["max_streams_per_credential"] == STREAMS
    assert line["body_timeout_seconds"] == BODY_SECONDS and line["max_connections"] == 10_000


def _head(method: str, path: str, token: str, *fields: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {token}", *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One whole response on a connection that stays open: its status, headers and body."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    status_line, *lines = head.strip().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (x.partition(":") for x in lines)}
    return int(status_line.split()[1]), headers, await reader.readexactly(int(headers["content-length"]))


async def _first_byte(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """The first byte the server sends within ``seconds``, or b"" while it says nothing (it is still
    waiting for the request)."""
    try:
        return await asyncio.wait_for(reader.read(1), timeout=seconds)
    except TimeoutError:
        return b""


async def test_a_body_trickled_past_the_body_timeout_gets_408_and_the_connection_closes(
    live: Live, home: Home
) -> None:
    body = json.dumps({"user_id": "trickle"}).encode().ljust(200)
    reader, writer = await _raw(live)
    loop = asyncio.get_running_loop()
    writer.write(
        _head("POST", "/v1/users", home.operator, "Content-Type: application/json", "Content-Length: 200")
    )
    started, sent, early = loop.time(), 0, b""
    with contextlib.suppress(ConnectionError):
        # A byte every fifth of a second: far too slow for 200 bytes, each one in time for the head's bound.
        while sent < len(body) and not (early := await _first_byte(reader, 0.2)):
            writer.write(body[sent : sent + 1])
            await writer.drain()
            sent += 1
    answer = early + await asyncio.wait_for(_answer(reader), timeout=BODY_SECONDS + 10)  # up to the close
    writer.close()
    head, _, error = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    assert json.loads(error)["error"]["code"] == "timeout" and "body" in json.loads(error)["error"]["message"]
    assert sent < len(body) and loop.time() - started >= BODY_SECONDS * 0.9
    await _logged(live, lambda line: line["route"] == "/v1/users" and line["status"] == 408)  # what went out


async def _logged(live: Live, wanted: Callable[[dict[str, Any]], bool]) -> None:
    """Wait (bounded) until the server logs a request line that is ``wanted``: the app writes its line
    when it has finished, a moment after the connection answered."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not any(
        wanted(line)
        for line in (json.loads(x) for x in live.server.logs().splitlines())
        if line.get("msg") == "request"
    ):
        assert loop.time() < deadline, "the request line was never logged"
        await asyncio.sleep(0.05)


async def test_a_chunked_body_split_across_writes_that_arrives_in_time_is_answered(
    live: Live, home: Home
) -> None:
    reader, writer = await _raw(live)
    fields = ("Content-Type: application/json", "Transfer-Encoding: chunked")
    writer.write(_head("POST", "/v1/users", home.operator, *fields) + b"5\r\n" + b'{"use')
    await writer.drain()
    assert await _first_byte(reader, BODY_SECONDS / 4) == b""  # the server waits for the rest
    rest = b'r_id": "split"}'
    writer.write(b"\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(rest), rest))
    await writer.drain()
    status, _, answer = await asyncio.wait_for(_response(reader), timeout=10)
    writer.close()
    assert status == 201, answer


async def test_a_long_poll_that_waits_past_the_body_timeout_is_not_cut(live: Live, home: Home) -> None:
    call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}, "wait": BODY_SECONDS * 3}
    body = json.dumps(call).encode()
    reader, writer = await _raw(live)
    loop = asyncio.get_running_loop()
    fields = ("Content-Type: application/json", f"Content-Length: {len(body)}")
    writer.write(_head("POST", "/v1/invocations", home.agent, *fields) + body[:10])
    await writer.drain()
    assert await _first_byte(reader, BODY_SECONDS / 4) == b""  # the body's clock runs
    writer.write(body[10:])
    await writer.drain()
    sent = loop.time()
    status, _, answer = await asyncio.wait_for(_response(reader), timeout=BODY_SECONDS * 3 + 30)
    writer.close()
    assert status == 200, answer  # the lamp never answered: the call is still waiting, not cut
    assert json.loads(answer)["status"] != "done" and loop.time() - sent >= BODY_SECONDS * 3 * 0.9


async def test_past_max_connections_a_new_connection_gets_503_and_a_freed_slot_takes_the_next(
    capped: Live,
) -> None:
    ws_url = capped.server.url.replace("http", "ws") + "/v1/device/connect"
    async with contextlib.AsyncExitStack() as stack:
        held = [
            await asyncio.open_connection("127.0.0.1", capped.server.port) for _ in range(CONNECTIONS - 1)
        ]
        for _, writer in held:
            stack.callback(writer.close)
        # A WebSocket is a connection too (one that has not said who it is yet).
        await stack.enter_async_context(websockets.connect(ws_url, compression=None))
        for reader, writer in held:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert (await asyncio.wait_for(_response(reader), timeout=10))[0] == 200
        reader, writer = await asyncio.open_connection("127.0.0.1", capped.server.port)
        answer = await asyncio.wait_for(_answer(reader), timeout=10)  # answered at once, then closed
        writer.close()
        head, _, error = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head, answer[:300]
        assert json.loads(error)["error"]["code"] == "busy"
        first_reader, first_writer = held[0]
        first_writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await asyncio.wait_for(_response(first_reader), timeout=10))[0] == 200  # the three still work
        held[-1][1].close()
        await held[-1][1].wait_closed()
        async with asyncio.timeout(10):  # once the server has seen it go, the next connection is taken
            while True:
                reader, writer = await asyncio.open_connection("127.0.0.1", capped.server.port)
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                answer = await _answer(reader)
                writer.close()
                if answer.startswith(b"HTTP/1.1 200"):  # else a 503 (or its reset): not seen yet
                    break
    refusals = [x for x in capped.server.logs().splitlines() if "new ones are refused" in x]
    assert len(refusals) == 1 and '"max_connections": 3' in refusals[0]  # said once, not per connection


MAX_HEAD = 16_384  # the test server's max_header_bytes (the default)
MAX_BODY = 65_536  # and its max_body_bytes


def _new_user(operator: str, size: int, head_size: int | None = None) -> tuple[bytes, bytes]:
    """A request that makes a user, its JSON body padded with spaces to ``size`` bytes and, with
    ``head_size``, its head padded to that many bytes: the head and the body."""
    body = json.dumps({"user_id": f"u-{secrets.token_hex(6)}"}).encode().ljust(size)
    fields = ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    head = _head("POST", "/v1/users", operator, *fields)
    if head_size is not None:
        padding = head_size - len(head) - len("X-Pad: \r\n")
        head = _head("POST", "/v1/users", operator, *fields, "X-Pad: " + "a" * padding)
        assert len(head) == head_size
    return head, body


async def _sent_in_pieces(live: Live, request: bytes, cuts: list[int]) -> tuple[int, bytes]:
    """``request`` written in pieces cut at ``cuts``, each sent whole before the next (the sending
    stops where the server has closed); the status and body of the server's answer. A plain socket,
    whose received bytes stay readable after the server closes on a body it did not read."""
    loop = asyncio.get_running_loop()
    edges = [0, *sorted({c % len(request) for c in cuts} - {0}), len(request)]
    with socket.create_connection(("127.0.0.1", live.server.port)) as sock:
        sock.setblocking(False)
        with contextlib.suppress(ConnectionError):
            for start, end in itertools.pairwise(edges):
                await asyncio.wait_for(loop.sock_sendall(sock, request[start:end]), timeout=10)
        answer = b""
        with contextlib.suppress(ConnectionError):
            while not _whole(answer) and (chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), 10)):
                answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert _whole(answer), answer[:300]
    return int(head.split(b" ", 2)[1]), body


def _whole(answer: bytes) -> bool:
    """Whether ``answer`` holds a whole response: its head, and as much body as it announced."""
    head, found, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return bool(found and length and len(body) >= int(length.group(1)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(20, MAX_BODY), cuts=st.lists(st.integers(1, 2**20), max_size=6))
@example(size=20_000, cuts=[])  # head and a 20 KB body in one write
@example(size=MAX_BODY, cuts=[])
async def test_a_body_within_its_bound_is_accepted_however_the_writes_split_the_request(
    live: Live, home: Home, size: int, cuts: list[int]
) -> None:
    head, body = _new_user(home.operator, size)
    status, answer = await _sent_in_pieces(live, head + body, cuts)
    assert status == 201, answer


async def test_a_head_of_exactly_max_header_bytes_is_read_with_the_body_that_follows_it(
    live: Live, home: Home
) -> None:
    head, body = _new_user(home.operator, 20_000, head_size=MAX_HEAD)
    status, answer = await _sent_in_pieces(live, head + body, [])
    assert status == 201, answer


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, 2**20), max_size=6))
@example(cuts=[])
async def test_a_head_one_byte_over_max_header_bytes_gets_431_in_the_error_shape_with_or_without_a_body(
    live: Live, home: Home, cuts: list[int]
) -> None:
    head, body = _new_user(home.operator, 200, head_size=MAX_HEAD + 1)
    status, error = await _sent_in_pieces(live, head + body, cuts)
    assert status == 431, error
    assert json.loads(error) == {
        "error": {
            "code": "too_large",
            "message": f"The request's headers are over {MAX_HEAD} bytes; send less.",
        }
    }


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(MAX_BODY + 1, MAX_BODY + 5000), cuts=st.lists(st.integers(1, 2**20), max_size=6))
async def test_a_body_over_its_bound_gets_413_in_the_error_shape_however_the_writes_split_it(
    live: Live, home: Home, size: int, cuts: list[int]
) -> None:
    head, body = _new_user(home.operator, size)
    status, error = await _sent_in_pieces(live, head + body, cuts)
    assert status == 413, error
    assert json.loads(error) == {
        "error": {"code": "too_large", "message": f"The body is over {MAX_BODY} bytes; send less."}
    }
