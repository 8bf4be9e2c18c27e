"""Background tasks stop for good when the gateway closes, even one whose first cancel was swallowed."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import anyio
import pytest

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


async def test_a_worker_whose_round_fails_logs_only_the_errors_type_and_runs_the_next_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rounds: list[int] = []
    second = asyncio.Event()
    told: list[bool] = []

    async def work() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise ValueError("the text of a message someone sent")
        second.set()

    async def pause(failed: bool) -> None:
        told.append(failed)
        if len(told) == 2:
            await asyncio.Event().wait()  # no third round

    worker = tasks.Periodic(
        "test-worker", work, pause, failed="test round failed", log=logging.getLogger("t")
    )
    with caplog.at_level(logging.ERROR, logger="t"):
        await worker.start()
        with anyio.fail_after(10):
            await second.wait()
        await worker.close()
    assert rounds == [0, 1] and told[:2] == [True, False]  # each pause is told how the round before ended
    [record] = [r for r in caplog.records if r.name == "t"]
    assert record.getMessage() == "test round failed" and record.__dict__["error"] == "ValueError"
    assert "someone sent" not in caplog.text


async def test_a_worker_that_does_not_start_with_a_round_waits_for_its_pause_first() -> None:
    go, ran = asyncio.Event(), asyncio.Event()
    paused = asyncio.Event()

    async def work() -> None:
        ran.set()

    async def pause(_failed: bool) -> None:
        paused.set()
        await go.wait()
        go.clear()

    worker = tasks.Periodic(
        "test-worker", work, pause, failed="failed", log=logging.getLogger("t"), at_start=False
    )
    await worker.start()
    await worker.start()  # started once only
    with anyio.fail_after(10):
        await paused.wait()
    assert not ran.is_set()
    go.set()
    with anyio.fail_after(10):
        await ran.wait()
    await worker.close()
    await worker.close()  # closing again does nothing
