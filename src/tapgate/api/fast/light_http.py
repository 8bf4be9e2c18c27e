"""uvicorn's HTTP protocol with tapgate's bounds (``BoundedHttp``), holding less for a request that waits
(a held long-poll, an agent's call).

Where uvicorn makes an ``asyncio.Event`` for each request and one for each connection's flow control, and
a ``deque`` for pipelined requests (made whether used or not), these are ``Flag``s and a queue made only
when a request is pipelined.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tapgate.api.bounded_http import BoundedHttp
from tapgate.flag import Flag


class LightHttp(BoundedHttp):
    """``BoundedHttp`` holding less for a request that waits: ``Flag``s for uvicorn's events and a
    pipeline queue made only when a request is pipelined."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pipeline = _Pipeline()  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow._is_writable_event = _raised()  # type: ignore[assignment]

    def _new_cycle(self) -> None:
        super()._new_cycle()
        self.cycle.message_event = Flag()  # type: ignore[assignment]


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
