"""Lean loopback clients for the bench: keep-alive HTTP/1.1 and WebSocket text frames on asyncio.

The load client must cost far less than the servers it measures, or it measures itself: a general HTTP
client spends more per request than the floor's whole route. These two protocols parse with httptools
(the parser uvicorn serves with) and frame WebSocket messages directly; they speak only to the bench's own
servers on loopback, send one request at a time per connection, and bound every wait.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import httptools

__all__ = ["HttpConnection", "Response", "WebSocketConnection", "WireError"]

_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TEXT, _CLOSE, _PING, _PONG, _CONTINUATION = 0x1, 0x8, 0x9, 0xA, 0x0


class WireError(Exception):
    """The connection broke, or the server answered something the bench cannot read."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    def __init__(self, host: str) -> None:
        self._host = host.encode()
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._waiter: asyncio.Future[Response] | None = None
        self._transport: asyncio.Transport | None = None
        self.closed = False

    @classmethod
    async def open(cls, host: str, port: int, within: float = 10.0) -> HttpConnection:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(within):
            _, protocol = await loop.create_connection(lambda: cls(f"{host}:{port}"), host, port)
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports subclass no asyncio class

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(WireError("the server closed the connection"))

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_exception(WireError(f"unreadable response: {e}"))
            self.close()

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        response = Response(self._parser.get_status_code(), b"".join(self._body))
        self._body = []
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(response)

    async def request(
        self, method: str, path: str, token: str = "", body: bytes | None = None, within: float = 60.0
    ) -> Response:
        """Send one request and wait (at most ``within`` seconds) for its whole response."""
        if self.closed or self._transport is None:
            raise WireError("the connection is closed")
        head = [f"{method} {path} HTTP/1.1".encode(), b"Host: " + self._host]
        if token:
            head.append(f"Authorization: Bearer {token}".encode())
        if body is not None:
            head.append(b"Content-Type: application/json")
            head.append(b"Content-Length: " + str(len(body)).encode())
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(b"\r\n".join(head) + b"\r\n\r\n" + (body or b""))
        try:
            async with asyncio.timeout(within):
                return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


class WebSocketConnection(asyncio.Protocol):
    """One WebSocket client connection: text frames out (masked), text frames in, pings answered."""

    def __init__(self, host: str, path: str, token: str, on_text: Callable[[str], None]) -> None:
        self._request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Version: 13\r\n"
        )
        self._key = base64.b64encode(os.urandom(16)).decode()
        self._request += f"Sec-WebSocket-Key: {self._key}\r\n"
        if token:
            self._request += f"Authorization: Bearer {token}\r\n"
        self._request += "\r\n"
        self._on_text = on_text
        self._buffer = bytearray()
        self._fragments: list[bytes] = []
        self._opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport: asyncio.Transport | None = None
        self.closed = False
        self.close_code: int | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        path: str,
        token: str,
        on_text: Callable[[str], None],
        within: float = 10.0,
    ) -> WebSocketConnection:
        """Connect and finish the upgrade; raises WireError when the server refuses it."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(within):
            _, protocol = await loop.create_connection(
                lambda: cls(f"{host}:{port}", path, token, on_text), host, port
            )
            await protocol._opened
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports subclass no asyncio class
        self._transport.write(self._request.encode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._opened.done():
            self._opened.set_exception(WireError("the server closed the connection during the upgrade"))
        if not self.lost.done():
            self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._opened.done():
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buffer[:end]).decode("latin-1")
            del self._buffer[: end + 4]
            accept = base64.b64encode(hashlib.sha1(self._key.encode() + _WS_GUID).digest()).decode()  # noqa: S324 (the protocol's own hash)
            if not head.startswith("HTTP/1.1 101") or accept not in head:
                self._opened.set_exception(WireError(f"upgrade refused: {head.splitlines()[0]}"))
                self.close()
                return
            self._opened.set_result(None)
        self._read_frames()

    def _read_frames(self) -> None:
        buffer = self._buffer
        while len(buffer) >= 2:
            first, second = buffer[0], buffer[1]
            length, offset = second & 0x7F, 2
            if length == 126:
                if len(buffer) < 4:
                    return
                length, offset = struct.unpack_from("!H", buffer, 2)[0], 4
            elif length == 127:
                if len(buffer) < 10:
                    return
                length, offset = struct.unpack_from("!Q", buffer, 2)[0], 10
            if second & 0x80:  # a server never masks; skip the key if one came anyway
                offset += 4
            if len(buffer) < offset + length:
                return
            payload = bytes(buffer[offset : offset + length])
            del buffer[: offset + length]
            self._frame(first & 0x80 != 0, first & 0x0F, payload)

    def _frame(self, fin: bool, opcode: int, payload: bytes) -> None:
        if opcode in (_TEXT, _CONTINUATION):
            self._fragments.append(payload)
            if fin:
                text = b"".join(self._fragments).decode()
                self._fragments = []
                self._on_text(text)
        elif opcode == _PING:
            self._send(_PONG, payload)
        elif opcode == _CLOSE:
            self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            self._send(_CLOSE, payload[:2])
            self.close()

    def send_text(self, text: str) -> None:
        self._send(_TEXT, text.encode())

    def _send(self, opcode: int, payload: bytes) -> None:
        if self.closed or self._transport is None:
            raise WireError("the connection is closed")
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        mask = os.urandom(4)
        if n:
            repeated = (mask * (n // 4 + 1))[:n]
            masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")
        else:
            masked = b""
        self._transport.write(head + mask + masked)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()
