"""Stopping a background task for good."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


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
