"""uvicorn's sans-I/O WebSocket protocol, holding less for an idle device link.

Each connection makes, when it is made, an ``asyncio.Queue`` for the messages it hands the app (three
deques and an event's) and an ``asyncio.Event`` for flow control (with its deque), and keeps both for the
link's life; an idle link has no message waiting and is always writable. Here the queue is a list made
only while messages wait (``Inbox``) and the event a ``Flag``, and the upgrade's request and response,
which uvicorn keeps for the connection's life but reads only until the response is sent, are let go then;
so are the request's headers, which the websockets library's parser keeps in its frame for as long as it
parses the link's frames. Everything else is uvicorn's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from tapgate.flag import Flag


class Inbox:
    """The part of ``asyncio.Queue`` uvicorn's protocol uses (``put_nowait``, ``get``, ``empty``), first in
    first out, with nothing made while it is empty and nobody waits."""

    __slots__ = ("_items", "_waiters")

    def __init__(self) -> None:
        self._items: list[Any] | None = None
        self._waiters: list[asyncio.Future[None]] | None = None

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: Any) -> None:
        if self._items is None:
            self._items = []
        self._items.append(item)
        self._wake_one()

    async def get(self) -> Any:
        while not self._items:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if self._waiters is not None and waiter in self._waiters:
                    self._waiters.remove(waiter)
                if self._items and not waiter.cancelled():
                    self._wake_one()  # it was woken for an item it will not take: the next one takes it
                raise
        item = self._items.pop(0)
        if not self._items:
            self._items = None
        return item

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                break
        if not self._waiters:
            self._waiters = None


class LightWebSockets(WebSocketsSansIOProtocol):
    """uvicorn's protocol with an ``Inbox`` for its queue and a ``Flag`` for its flow control, which lets
    go of the upgrade's request, its headers and the response once the response is sent (uvicorn reads
    none of them after; the app has its own copy of the headers in its scope)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = Inbox()  # type: ignore[assignment]
        writable = Flag()
        writable.set()
        self.writable = writable  # type: ignore[assignment]

    async def send(self, message: Any) -> None:
        await super().send(message)
        if self.handshake_complete and getattr(self, "response", None) is not None:
            if getattr(self, "request", None) is not None:
                self.request.headers.clear()  # the same object stays in the parser's frame
            self.request = self.response = None  # type: ignore[assignment]
