"""A flag a task waits on: ``asyncio.Event``'s ``set``, ``clear``, ``is_set`` and ``wait``, for waiters that
live for hours.

An ``asyncio.Event`` makes its queue of waiters when it is made, about 770 bytes of an event's ~860; a
live link or a held long-poll holds one or two for as long as it lives. A ``Flag`` makes its waiters'
list only when something waits, and drops it when set: about 70 bytes idle.
"""

from __future__ import annotations

import asyncio
from typing import Literal


class Flag:
    __slots__ = ("_value", "_waiters")

    def __init__(self) -> None:
        self._value = False
        self._waiters: list[asyncio.Future[bool]] | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        """Set it, and wake every task waiting on it."""
        if self._value:
            return
        self._value = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(True)

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> Literal[True]:
        """Until it is set (at once if it is); True, as ``asyncio.Event.wait``."""
        if self._value:
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
            return True
        finally:
            self._drop(waiter)

    async def wait_for(self, seconds: float) -> bool:
        """Until it is set (True, at once if it is) or ``seconds`` have passed (False). One timer and no
        timeout object, which a held long-poll would keep (about 0.6 KiB) for as long as it waits."""
        if self._value:
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        timer = loop.call_later(max(0.0, seconds), _time_up, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._drop(waiter)

    def _drop(self, waiter: asyncio.Future[bool]) -> None:
        if self._waiters is not None and waiter in self._waiters:
            self._waiters.remove(waiter)


def _time_up(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
