"""uvicorn's HTTP protocol with bounded work before a request is whole: at most ``max_header_bytes`` of
request line and headers, all of it within ``header_timeout_seconds`` of the first byte (or of the
connection); then the whole body (Content-Length or chunked) within ``body_timeout_seconds`` of the
head's end; and at most ``max_connections`` connections (WebSockets included) open in the process. Past
any of these, the connection gets one answer in the API's error shape (431, 408 or 503) and is closed;
nothing more of the request reaches the app. uvicorn itself bounds none of them when it parses with
httptools (its fast parser, kept); its ``limit_concurrency`` counts running requests too, looks only once
a head is read, lets WebSocket upgrades past, and answers in plain text.

The body's clock runs only while the body is due from the client: not while uvicorn holds reading back
because the app has not taken what came (flow control), not while the client waits for ``100 Continue``,
and never once the app has begun its answer; a request that waits (a long-poll) has its body already.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}
log = logging.getLogger("tapgate.limits")
# Set in a request's scope when the connection answered it itself (a body too slow): the access log
# records that answer, not the one the app made of the missing body (which never went out).
ANSWERED = "tapgate.answered"


class BoundedHttp(HttpToolsProtocol):
    """Named by import path, so uvicorn's worker processes get it too; ``bound`` sets the limits from
    the settings in each process before it serves."""

    max_head = 16_384
    head_seconds = 10.0
    body_seconds = 30.0
    max_connections = 10_000
    _full = False  # the cap refused a connection and none was taken since: said once

    @classmethod
    def bound(
        cls,
        max_header_bytes: int,
        header_timeout_seconds: float,
        body_timeout_seconds: float = 30.0,
        max_connections: int = 10_000,
    ) -> None:
        cls.max_head, cls.head_seconds = max_header_bytes, header_timeout_seconds
        cls.body_seconds, cls.max_connections = body_timeout_seconds, max_connections

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = _Head()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:  # this one counted: it is one too many
            self._over_cap()
            return
        if BoundedHttp._full:
            BoundedHttp._full = False
            log.info(
                "connections below max_connections again", extra={"max_connections": self.max_connections}
            )
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._body_done()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        head = self._head
        if head.open:
            self._arm()
            room = self.max_head - head.bytes
            if len(data) > room:
                # The parser, given the head's allowance only, says where the head ends: the body (or the
                # next request) that came in the same write is not the head's and is not counted as such.
                if room > 0:
                    self.data_received(data[:room])
                if head.open and not self.transport.is_closing():
                    self._refuse(
                        431, "too_large", f"The request's headers are over {self.max_head} bytes; send less."
                    )
                elif not self.transport.is_closing() and self.transport.get_protocol() is self:
                    self.data_received(data[room:])  # unless the request was a WebSocket's upgrade
                return
            head.bytes += len(data)
        super().data_received(data)
        if head.body and head.body_timer is None and not self.transport.is_closing():
            # Armed only when a write left the body short: a body that came with its head costs no timer.
            head.body_timer = self.loop.call_later(self.body_seconds, self._slow_body)

    def on_headers_complete(self) -> None:
        self._head.open = False
        self._disarm()
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # a request's cycle, made just now: its task has not run yet
            self._new_cycle()

    def _new_cycle(self) -> None:
        self._head.body = True  # until the message is complete (at once for a request without one)

    def on_message_complete(self) -> None:
        self._body_done()
        super().on_message_complete()
        # What comes next is the next request's head, though this one may not be answered yet; and
        # until now it was this request's body, though it may have been answered already.
        self._head.open, self._head.bytes = True, 0

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

    def _body_done(self) -> None:
        head = self._head
        head.body = False
        if head.body_timer is not None:
            head.body_timer.cancel()
            head.body_timer = None

    def _slow_body(self) -> None:
        head, cycle = self._head, self.cycle
        head.body_timer = None
        if not head.body or self.transport.is_closing() or cycle is None or cycle.response_started:
            return  # the body came, or the app answered without it: nothing is owed
        if self.flow.read_paused or cycle.waiting_for_100_continue:
            # The app has not taken what came, or not asked for the rest: the client is not the slow one.
            head.body_timer = self.loop.call_later(self.body_seconds, self._slow_body)
            return
        cycle.disconnected = True  # the app's receive() ends; nothing it sends goes out after the 408
        cycle.scope[ANSWERED] = 408  # type: ignore[literal-required]
        cycle.message_event.set()
        seconds = f"{self.body_seconds:g}"
        self._refuse(
            408, "timeout", f"The request's body did not arrive within {seconds} s; send it at once."
        )

    def _over_cap(self) -> None:
        if not BoundedHttp._full:
            BoundedHttp._full = True
            log.warning(
                "connections at max_connections; new ones are refused",
                extra={"max_connections": self.max_connections},
            )
        self._refuse(
            503,
            "busy",
            f"The gateway holds its most connections ({self.max_connections}) just now; try again shortly.",
            retry_after=True,
        )

    def _refuse(self, status: int, code: str, message: str, retry_after: bool = False) -> None:
        self._disarm()
        self._body_done()
        self._head.open = False
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        head = (
            f"HTTP/1.1 {status} ".encode() + _REASONS[status] + b"\r\n"
            b"content-type: application/json\r\n"
            b"content-length: "
            + str(len(body)).encode()
            + b"\r\n"
            + (b"retry-after: 1\r\n" if retry_after else b"")
            + b"connection: close\r\n\r\n"
        )
        if not self.transport.is_closing():
            self.transport.write(head + body)
            self.transport.close()


class _Head:
    """Where the request stands: its head still open, the head's bytes so far, the timer that bounds the
    head's time; its body still due, and the timer that bounds the body's."""

    __slots__ = ("body", "body_timer", "bytes", "open", "timer")

    def __init__(self) -> None:
        self.open = True
        self.bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.body = False
        self.body_timer: asyncio.TimerHandle | None = None
