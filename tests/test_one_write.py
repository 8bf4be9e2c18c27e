"""A response of known length leaves in one write; a streamed one begins at once (``api/one_write.py``).

uvicorn's protocol runs as it does in ``tapgate serve``, fed the bytes of real requests; the transport
under it is asyncio's interface recording the writes (the kernel's side of a socket is not observable:
two writes on loopback usually arrive as one read).
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from tapgate.api.bounded_http import BoundedHttp
from tapgate.api.one_write import OneWriteHttp

WAIT = 30  # seconds a response may take on a busy machine

events = asyncio.Event()


async def answer(request: Request) -> Response:
    return JSONResponse({"ok": True, "text": "ünïcode"})


async def stream(request: Request) -> Response:
    async def body() -> Any:
        await events.wait()
        yield b"data: first\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


async def nothing(request: Request) -> Response:
    return Response(status_code=204)


APP = Starlette(
    routes=[
        Route("/answer", answer, methods=["GET", "HEAD"]),
        Route("/stream", stream),
        Route("/none", nothing),
    ]
)


class Recorded(asyncio.Transport):
    """asyncio's transport interface, keeping every write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def connected(protocol_class: type[HttpToolsProtocol]) -> tuple[HttpToolsProtocol, Recorded]:
    config = Config(APP, log_level="warning", access_log=False)
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = Recorded()
    protocol.connection_made(transport)
    return protocol, transport


async def until(condition: Any) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not condition():
        assert loop.time() < deadline, "no response"
        await asyncio.sleep(0.001)


def request(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nhost: tapgate\r\n\r\n".encode()


async def test_a_json_answer_is_one_write_of_its_head_and_body_where_uvicorn_makes_two() -> None:
    for protocol_class, writes in ((HttpToolsProtocol, 2), (OneWriteHttp, 1), (BoundedHttp, 1)):
        protocol, transport = connected(protocol_class)
        protocol.data_received(request("/answer"))
        await until(lambda transport=transport: b"}" in b"".join(transport.writes))
        assert len(transport.writes) == writes, protocol_class.__name__
        head, _, body = b"".join(transport.writes).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and b"content-length: " in head
        assert body == '{"ok":true,"text":"ünïcode"}'.encode()
        protocol.connection_lost(None)


async def test_answers_in_a_row_on_one_connection_each_go_in_one_write() -> None:
    protocol, transport = connected(BoundedHttp)

    def sent() -> list[bytes]:
        return [w for w in transport.writes if w]  # uvicorn writes an empty body as b"": no system call

    for n in range(1, 4):
        protocol.data_received(request("/answer"))
        await until(lambda n=n: len(sent()) == n and sent()[-1].endswith(b"}"))
    # a HEAD answer (a head of known length and no body write) and a 204, sent at once on the connection
    protocol.data_received(request("/answer", "HEAD") + request("/none"))
    await until(lambda: len(sent()) == 5)
    assert sent()[3].startswith(b"HTTP/1.1 200 OK") and sent()[3].endswith(b"\r\n\r\n")
    assert sent()[4].startswith(b"HTTP/1.1 204 No Content")
    assert all(w.count(b"HTTP/1.1 ") == 1 for w in sent())  # each its own, whole response
    protocol.connection_lost(None)


async def test_a_streamed_answer_has_its_head_written_before_its_first_event() -> None:
    events.clear()
    protocol, transport = connected(BoundedHttp)
    protocol.data_received(request("/stream"))
    await until(lambda: len(transport.writes) == 1)
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK") and b"text/event-stream" in transport.writes[0]
    events.set()
    await until(lambda: b"data: first" in b"".join(transport.writes))
    protocol.connection_lost(None)
