"""How a request waits for something to change: the long-poll for a device's work, the inbox, a call
waiting for its answer, the event stream, the tool list's changes and a device's live link.

Each subscribes to its wake key first, then looks; while it found nothing and its time is not up, it
sleeps until woken, and looks again. A wake can be missed while notifications are degraded (another
process's notification lost on the way): then no sleep lasts longer than the poll interval, so a waiter
looks again on its own. ``Deadline`` is the time a waiting request has; ``sleep_until_woken`` is its one
sleep.
"""

from __future__ import annotations

import asyncio
import contextlib

from tapgate.flag import Flag
from tapgate.ports import Woken
from tapgate.services.context import Context


class Deadline:
    """The moment a waiting request answers with what it has: ``seconds`` from now, at most
    ``longest``."""

    __slots__ = ("_at", "_loop")

    def __init__(self, seconds: float, longest: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._at = self._loop.time() + max(0.0, min(float(seconds), longest))

    def left(self) -> float:
        """Seconds until the deadline; zero or less once it has passed."""
        return self._at - self._loop.time()


def wait_slice(ctx: Context, left: float) -> float:
    """How long one wait may sleep: all that is left, or the poll interval while notifications may be
    missed."""
    if ctx.wake.degraded:
        return max(0.0, min(left, ctx.limits.invocation_poll_seconds))
    return max(0.0, left)


async def sleep_until_woken(ctx: Context, woken: Woken, seconds: float | None) -> bool:
    """Sleep until ``woken`` is set (True) or ``seconds`` have passed (False; None: no limit of its
    own), and no longer than the poll interval while notifications may be missed (the caller then looks
    again)."""
    if seconds is None:
        if not ctx.wake.degraded:
            return await woken.wait()
        seconds = ctx.limits.invocation_poll_seconds
    seconds = wait_slice(ctx, seconds)
    if isinstance(woken, Flag):  # it times its own wait: nothing more is held while it waits
        return await woken.wait_for(seconds)
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for wraps the wait in a task of its own, a
    # task per waiting request (and per held long-poll, for as long as it is held).
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await woken.wait()
        return True
    return False
