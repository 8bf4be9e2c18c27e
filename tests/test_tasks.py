"""Background tasks stop for good when the gateway closes, even one whose first cancel was swallowed."""

from __future__ import annotations

import asyncio
import contextlib

import anyio

from tapgate import tasks


async def test_a_task_that_swallows_a_cancel_is_stopped_all_the_same() -> None:
    started = asyncio.Event()

    async def stubborn() -> None:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # as a database driver's wait can swallow it
            await asyncio.sleep(3600)
        await asyncio.sleep(3600)  # the next round's sleep: an hour, unless asked again

    task = asyncio.create_task(stubborn())
    await started.wait()
    with anyio.fail_after(10):
        await tasks.stop(task)
    assert task.done()


async def test_stopping_no_task_or_a_finished_one_does_nothing() -> None:
    await tasks.stop(None)
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await tasks.stop(done)
    assert done.done()
