"""Bounded resources on a real `tapgate serve` (DESIGN §15): request heads are bounded in size and time,
WebSocket frames in size (before the link authenticates too), and one token holds at most
max_streams_per_credential streams at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
import websockets

from tapgate.adapters.store.migrate import migrate
from tests.conftest import blocking
from tests.live import Server, new_tenant, write_config
from tests.world import LAMP, bearer, device_body

HEAD_SECONDS = 1.0  # the test server's header_timeout_seconds (the default is 10)
STREAMS = 3  # the test server's max_streams_per_credential (the default is 8)


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
        folder, url, header_timeout_seconds=HEAD_SECONDS, max_streams_per_credential=STREAMS
    )
    server = Server(config).start()
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
