"""uvicorn's HTTP protocol, writing a whole response of known length in one write.

uvicorn writes a response's status line and headers the moment the app starts the response, and its body
in a second write: two system calls and two TCP segments for every answer, and on loopback the kernel's
work for each segment is done in the sender's call. For a response that says its length (every JSON
answer: Starlette sets ``content-length``) this protocol holds the head until the body comes and writes
them together. A streamed response (server-sent events, MCP's streams: no length, chunked) has its head
written at once, so its client sees the response begin before the first event.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_LENGTH = b"\r\ncontent-length: "  # as uvicorn writes it: header names lowercased


class OneWriteHttp(HttpToolsProtocol):
    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle is before:  # an upgrade, or nothing new
            return
        # A new request's cycle, not yet running (perhaps behind another on this connection).
        transport = _OneWrite(self.transport)
        cycle.transport = transport  # type: ignore[assignment]
        completed = cycle.on_response

        def on_response() -> None:
            transport.flush()  # a head with no body write (HEAD, an empty answer) goes now
            completed()

        cycle.on_response = on_response


class _OneWrite:
    """One response's view of the connection's transport: a first write that is a head of known length
    is held and goes out with the next write (the body); anything else goes straight through."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._first = True
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._first:
            self._first = False
            if data.endswith(b"\r\n\r\n") and _LENGTH in data:
                self._head = bytes(data)
                return
        if self._head is not None:
            data, self._head = self._head + data, None
        self._transport.write(data)

    def flush(self) -> None:
        """Write a held head now (its response ended without another write)."""
        self._first = False
        if self._head is not None:
            self.write(b"")

    def close(self) -> None:
        self.flush()  # closed before any body: the head still goes
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
