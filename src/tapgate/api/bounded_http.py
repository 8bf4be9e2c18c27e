"""uvicorn's HTTP protocol with a bounded request head: at most ``max_header_bytes`` of request line and
headers, all of it within ``header_timeout_seconds`` of the first byte (or of the connection). Past
either, the connection gets one answer in the API's error shape (431 or 408) and is closed; nothing of
the request reaches the app. uvicorn itself bounds neither when it parses with httptools (its fast
parser, kept).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class BoundedHttp(HttpToolsProtocol):
    """Named by import path, so uvicorn's worker processes get it too; ``bound`` sets the limits from
    the settings in each process before it serves."""

    max_head = 16_384
    head_seconds = 10.0

    @classmethod
    def bound(cls, max_header_bytes: int, header_timeout_seconds: float) -> None:
        cls.max_head, cls.head_seconds = max_header_bytes, header_timeout_seconds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_open = True
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head_open:
            self._arm()
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head:
                self._refuse(
                    431, "too_large", f"The request's headers are over {self.max_head} bytes; send less."
                )
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head_open, self._head_bytes = True, 0  # the next request on this connection

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_seconds, self._late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _late(self) -> None:
        self._head_timer = None
        if self._head_open and not self.transport.is_closing():
            seconds = f"{self.head_seconds:g}"
            self._refuse(
                408, "timeout", f"The request's headers did not arrive within {seconds} s; send them at once."
            )

    def _refuse(self, status: int, code: str, message: str) -> None:
        self._disarm()
        self._head_open = False
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        head = (
            f"HTTP/1.1 {status} ".encode() + _REASONS[status] + b"\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n"
        )
        if not self.transport.is_closing():
            self.transport.write(head + body)
            self.transport.close()
