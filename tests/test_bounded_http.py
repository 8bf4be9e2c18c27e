"""tapgate's lighter HTTP protocol (api/fast/light_http.py) keeps uvicorn's behaviour with less held per
connection: pipelined requests are answered in order, a response waits while the transport is full and
goes on when it drains, and a connection's protocol holds no dictionary of its own, no deque and no event
before its first request. The protocol is driven through its asyncio interface with a transport that
records what is written, as the event loop would drive it; the live server answers pipelined requests in
tests/test_bounded_resources.py."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from tapgate.api.fast.light_http import LightHttp


class Transport(asyncio.Transport):
    """What the protocol writes, kept."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    body = scope["path"].encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]}
    )
    await send({"type": "http.response.body", "body": body})


def _protocol() -> LightHttp:
    config = Config(_app, log_config=None)
    config.load()
    return LightHttp(config, ServerState(), {}, _loop=asyncio.get_running_loop())


async def _until(condition: Any) -> None:
    async with asyncio.timeout(30):
        while True:
            if condition():
                return
            await asyncio.sleep(0)


async def test_pipelined_requests_are_answered_in_order() -> None:
    protocol, transport = _protocol(), Transport()
    protocol.connection_made(transport)
    protocol.data_received(b"".join(b"GET /%d HTTP/1.1\r\nhost: x\r\n\r\n" % n for n in range(3)))
    await _until(lambda: transport.written.count(b"HTTP/1.1 200") == 3)
    await _until(lambda: transport.written.endswith(b"/2"))
    bodies = [part.rsplit(b"\r\n\r\n", 1)[-1] for part in bytes(transport.written).split(b"HTTP/1.1 ")[1:]]
    assert bodies == [b"/0", b"/1", b"/2"]
    protocol.connection_lost(None)


async def test_a_response_waits_while_the_transport_is_full_and_goes_on_once_it_drains() -> None:
    protocol, transport = _protocol(), Transport()
    protocol.connection_made(transport)
    protocol.pause_writing()
    protocol.data_received(b"GET /late HTTP/1.1\r\nhost: x\r\n\r\n")
    for _ in range(20):  # the request's task runs, and waits for the transport
        await asyncio.sleep(0)
    assert b"/late" not in transport.written
    protocol.resume_writing()
    await _until(lambda: transport.written.endswith(b"/late"))
    protocol.connection_lost(None)


async def test_a_connection_holds_little_before_its_first_request() -> None:
    """About 2.5 KiB (uvicorn's protocol with its parser, its flow control and the request's scope); a
    dictionary of its own would add 1.3 KiB, a deque or an asyncio.Event 0.76 KiB each (5.2 KiB with
    all three)."""
    config = Config(_app, log_config=None)
    config.load()
    state, loop = ServerState(), asyncio.get_running_loop()
    kept = []
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(200):
            protocol = LightHttp(config, state, {}, _loop=loop)
            protocol.connection_made(Transport())
            protocol.on_message_begin()
            kept.append(protocol)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    transports = 200 * 200  # the recording transports', counted with them (a bytearray each, and the object)
    each = (sum(s.size_diff for s in after.compare_to(before, "filename")) - transports) / len(kept)
    assert each < 3 * 1024, f"{each:.0f} bytes a connection"
