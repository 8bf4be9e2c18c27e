"""tapgate.flag.Flag behaves as asyncio.Event does for its waiters (it stands in for one)."""

from __future__ import annotations

import asyncio

import pytest

from tapgate.flag import Flag


async def test_set_wakes_every_waiter_and_a_set_flag_does_not_wait() -> None:
    flag = Flag()
    waiters = [asyncio.create_task(flag.wait()) for _ in range(3)]
    await asyncio.sleep(0)  # each is waiting now
    assert not any(w.done() for w in waiters)
    flag.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert flag.is_set()
    assert await flag.wait() is True  # set: no wait at all


async def test_a_waiter_woken_then_cleared_still_returns_and_clear_makes_the_next_wait_wait() -> None:
    flag = Flag()
    waiter = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    flag.set()
    flag.clear()  # before the waiter ran: it was woken all the same, as asyncio.Event's are
    assert await waiter is True
    assert not flag.is_set()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await flag.wait()


async def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    flag = Flag()
    waiter = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert flag._waiters == []  # nothing left to wake, nothing kept
    flag.set()
    assert flag.is_set()


async def test_a_timed_wait_ends_when_set_or_when_its_time_is_up_and_leaves_nothing_behind() -> None:
    flag = Flag()
    waiter = asyncio.create_task(flag.wait_for(60))
    await asyncio.sleep(0)
    flag.set()
    flag.clear()  # before the waiter ran: it was woken all the same
    assert await waiter is True
    assert await flag.wait_for(0.01) is False  # nobody sets it: its time is up
    assert flag._waiters == []
    cancelled = asyncio.create_task(flag.wait_for(60))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert flag._waiters == []
    flag.set()
    assert await flag.wait_for(0) is True  # set: no wait at all
