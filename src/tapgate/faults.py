"""Named crash points: the reliability tests kill the gateway (SIGKILL) at a chosen point of a call's life.

Unarmed, ``crash_point`` does nothing. ``tapgate serve`` arms it from ``TAPGATE_CRASH_AT`` (a point's
name) and ``TAPGATE_CRASH_AFTER`` (kill at that hit of the point, default 1); an in-process simulation
installs its own hook instead. No setting a deployment reads names these variables.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping

# Where an invocation's life can be cut; the tests cover each one.
POINTS = (
    "invoke.before_commit",  # the row, its journal entry and its push row are written, not committed
    "invoke.after_commit",  # committed, the agent not yet answered (and no push sent yet)
    "result.waiting",  # the agent waits on the call
    "answer.after_commit",  # the device's result is committed, the device not yet answered
    "expiry.sweep",  # the sweep is between two expiries
    "approval.verify",  # a decision's signature is verified, the decision not yet committed
)
# Where a push's life can be cut (tests/test_push_crash.py).
PUSH_POINTS = ("push.after_send",)  # the relay or service took the push; the worker has not recorded it

_hook: Callable[[str], None] | None = None


def crash_point(name: str) -> None:
    """Mark that the process is at ``name``; an armed hook may end it here."""
    if _hook is not None:
        _hook(name)


def install(hook: Callable[[str], None] | None) -> None:
    """Run ``hook`` at every crash point (None: unarm)."""
    global _hook
    _hook = hook


def arm(point: str, after: int = 1) -> None:
    """SIGKILL this process at the ``after``-th time it reaches ``point``. Raises ValueError for an
    unknown point."""
    if point not in POINTS + PUSH_POINTS:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(POINTS + PUSH_POINTS)}")
    left = [max(1, after)]

    def kill(name: str) -> None:
        if name != point:
            return
        left[0] -= 1
        if left[0] == 0:
            sys.stderr.write(f"tapgate: crash point {name} reached: SIGKILL\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    install(kill)


def arm_from(environ: Mapping[str, str]) -> None:
    """Arm from ``TAPGATE_CRASH_AT`` / ``TAPGATE_CRASH_AFTER`` when they are set."""
    point = environ.get("TAPGATE_CRASH_AT")
    if point:
        arm(point, int(environ.get("TAPGATE_CRASH_AFTER", "1")))
