"""The WebSocket protocol tapgate serves links with (api/fast/light_ws.py) keeps uvicorn's behaviour: its
inbox hands messages over first in, first out, to the waiter woken first, and loses none to a waiter
cancelled after it was woken. The links themselves run on it in every live test
(tests/test_device_protocol_live.py)."""

from __future__ import annotations

import asyncio

import pytest

from tapgate.api.fast.light_ws import Inbox, LightWebSockets
from tapgate.cli import UVICORN_OPTIONS


async def test_messages_come_out_in_the_order_they_went_in_and_a_get_waits_for_one() -> None:
    inbox = Inbox()
    assert inbox.empty()
    inbox.put_nowait(1)
    inbox.put_nowait(2)
    assert not inbox.empty()
    assert [await inbox.get(), await inbox.get()] == [1, 2]
    assert inbox.empty() and inbox._items is None  # nothing kept while empty
    waiting = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    inbox.put_nowait(3)
    assert await waiting == 3
    assert inbox._waiters is None


async def test_waiters_are_served_in_turn_and_a_cancelled_one_loses_no_message() -> None:
    inbox = Inbox()
    first = asyncio.create_task(inbox.get())
    second = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    inbox.put_nowait("a")  # wakes the first
    first.cancel()  # cancelled after it was woken: the message goes to the next waiter
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == "a"
    assert inbox.empty() and inbox._waiters is None


def test_tapgate_serve_runs_links_on_it() -> None:
    module, _, name = UVICORN_OPTIONS["ws"].partition(":")
    assert (module, name) == (LightWebSockets.__module__, LightWebSockets.__name__)
