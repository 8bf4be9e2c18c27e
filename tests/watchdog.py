"""A test that runs past its deadline stops the run with a picture of where it waited.

A hung test would otherwise hold the whole suite until CI's own limit ends it, with nothing to say where.
When one test (setup, call and teardown) has run TAPGATE_TEST_DEADLINE seconds (600 unless told), the
watchdog writes every thread's stack and every unfinished asyncio task's stack to the terminal, then
interrupts the run: pytest ends it as after Ctrl-C and prints what failed so far.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import os
import signal
import sys
import threading
from collections.abc import Iterator

import pytest

DEADLINE_SECONDS = float(os.environ.get("TAPGATE_TEST_DEADLINE", "600"))


def _dump(nodeid: str) -> None:
    out = sys.stderr
    print(f"\n=== {nodeid} ran past {DEADLINE_SECONDS:.0f} s; stacks follow ===", file=out, flush=True)
    faulthandler.dump_traceback(file=out, all_threads=True)
    tasks = [t for t in gc.get_objects() if isinstance(t, asyncio.Task) and not t.done()]
    print(f"\n=== {len(tasks)} unfinished asyncio tasks ===", file=out, flush=True)
    for task in tasks:
        try:
            task.print_stack(limit=12, file=out)
        except Exception as e:  # a task may change under us: this is a diagnosis, not a test
            print(f"{task!r}: {type(e).__name__}", file=out)
    out.flush()


def _expire(item: pytest.Item) -> None:
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)  # so the stacks reach the terminal, not the capture
    _dump(item.nodeid)
    os.kill(os.getpid(), signal.SIGINT)  # a real signal wakes a main thread asleep in select


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    timer = threading.Timer(DEADLINE_SECONDS, _expire, args=(item,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
