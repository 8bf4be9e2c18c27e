"""uvicorn's HTTP protocol with a bounded request head: at most ``max_header_bytes`` of request line and
headers, all of it within ``header_timeout_seconds`` of the first byte (or of the connection). Past
either, the connection gets one answer in the API's error shape (431 or 408) and is closed; nothing of
the request reaches the app. uvicorn itself bounds neither when it parses with httptools (its fast
parser, kept).

It also holds less for a request that waits (a held long-poll, an agent's call): where uvicorn makes an
``asyncio.Event`` for each request and one for each connection's flow control, and a ``deque`` for
pipelined requests (each about 760 bytes, most of it the deque's first block, made whether used or not),
these are ``Flag``s and a queue made only when a request is pipelined; and the head's own state is one
attribute, since a 30th attribute would turn the protocol's compact attributes into a dictionary of its
own (about 1.3 KiB more a connection).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tapgate.flag import Flag

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
        self._head = _Head()
        self.pipeline = _Pipeline()  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow._is_writable_event = _raised()  # type: ignore[assignment]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        head = self._head
        if head.open:
            self._arm()
            head.bytes += len(data)
            if head.bytes > self.max_head:
                self._refuse(
                    431, "too_large", f"The request's headers are over {self.max_head} bytes; send less."
                )
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head.open = False
        self._disarm()
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # a request's cycle, made just now: its task has not run yet
            self.cycle.message_event = Flag()  # type: ignore[assignment]

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head.open, self._head.bytes = True, 0  # the next request on this connection

    def _arm(self) -> None:
        if self._head.timer is None:
            self._head.timer = self.loop.call_later(self.head_seconds, self._late)

    def _disarm(self) -> None:
        if self._head.timer is not None:
            self._head.timer.cancel()
            self._head.timer = None

    def _late(self) -> None:
        self._head.timer = None
        if self._head.open and not self.transport.is_closing():
            seconds = f"{self.head_seconds:g}"
            self._refuse(
                408, "timeout", f"The request's headers did not arrive within {seconds} s; send them at once."
            )

    def _refuse(self, status: int, code: str, message: str) -> None:
        self._disarm()
        self._head.open = False
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


class _Head:
    """Where the request head stands: still open, its bytes so far, the timer that bounds its time."""

    __slots__ = ("bytes", "open", "timer")

    def __init__(self) -> None:
        self.open = True
        self.bytes = 0
        self.timer: asyncio.TimerHandle | None = None


class _Pipeline:
    """The part of ``deque`` uvicorn's protocol uses for pipelined requests (``appendleft``, ``pop``,
    truth), first in first out, with nothing made until a request is pipelined."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[Any] | None = None

    def __bool__(self) -> bool:
        return bool(self._items)

    def appendleft(self, item: Any) -> None:
        if self._items is None:
            self._items = []
        self._items.insert(0, item)

    def pop(self) -> Any:
        if not self._items:
            raise IndexError("pop from an empty pipeline")
        item = self._items.pop()
        if not self._items:
            self._items = None
        return item


def _raised() -> Flag:
    """A flag that starts set, as uvicorn's flow control's writable event does."""
    flag = Flag()
    flag.set()
    return flag
