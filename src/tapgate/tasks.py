"""Background work: ``Periodic``, the one shape of every background worker of a gateway process, and
``stop``, which ends a task for good."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

Round = Callable[[], Awaitable[object]]
Pause = Callable[[bool], Awaitable[object]]  # given whether the round before it failed


class Periodic:
    """A round of work run again and again in a task of its own, from ``start`` until ``close``.

    ``pause`` is what comes between two rounds (``every(seconds)``, or a wait for whatever asks for the
    next round); it is told whether the round before failed. With ``at_start`` the first round runs at
    once, otherwise after a pause. A round that raises is logged as ``failed`` at ``level`` with the
    error's type only (its text may hold what a request said), and the next round comes as usual: a
    database that is away for a while ends no worker.
    """

    def __init__(
        self,
        name: str,
        work: Round,
        pause: Pause,
        *,
        failed: str,
        log: logging.Logger,
        at_start: bool = True,
        level: int = logging.ERROR,
    ) -> None:
        self.name = name
        self._work = work
        self._pause = pause
        self._failure = failed
        self._log = log
        self._at_start = at_start
        self._level = level
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def close(self) -> None:
        task, self._task = self._task, None
        await stop(task)

    async def _run(self) -> None:
        failed = False
        if not self._at_start:
            await self._pause(failed)
        while True:
            try:
                await self._work()
                failed = False
            except Exception as e:
                self._log.log(self._level, self._failure, extra={"error": type(e).__name__})
                failed = True
            await self._pause(failed)


def every(seconds: float | Callable[[], float]) -> Pause:
    """A pause of ``seconds`` (or of what ``seconds()`` says at each pause), failed round or not."""

    async def pause(_failed: bool) -> None:
        await asyncio.sleep(seconds() if callable(seconds) else seconds)

    return pause


async def stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended. A cancel that lands inside a database driver's wait
    can be swallowed there, leaving the task asleep until its next round (an hour, for retention): it is
    asked again every second until it has really stopped."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()
