"""An answer handed, in this process, from the transaction that wrote it to the requests waiting on it.

An agent's call that waits for its answer used to read the invocation back once the answer's commit woke
it: a transaction of its own, in the process that had just written the same row. A waiting request now
holds a slot for its invocation; the answer, if it finds a slot, reads the device's presence in its own
transaction and, once committed, leaves the ended invocation in the slot, where the woken request takes
it without reading anything. A request in another process, one that found no slot filled (it began to
wait after the answer), and every other ending (an expiry, a revoked device, a declined approval) read
the row as before. Only an ended invocation is handed over, and an ended invocation never changes again,
so what the slot holds is what a read would return.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tapgate.domain.invocations import Invocation


@dataclass(slots=True)
class Slot:
    """One invocation's waiting requests in this process, and its answer once handed over."""

    waiting: int = 0
    ended: tuple[Invocation, bool | None] | None = None  # the invocation, and whether its device is online


class Handover:
    def __init__(self) -> None:
        self._slots: dict[str, Slot] = {}

    @contextmanager
    def waiting(self, key: str) -> Iterator[Slot]:
        """A slot for the invocation notified on ``key``, held while the request waits."""
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = Slot()
        slot.waiting += 1
        try:
            yield slot
        finally:
            slot.waiting -= 1
            if slot.waiting == 0:
                del self._slots[key]

    def waiting_on(self, key: str) -> int:
        """How many requests in this process wait on ``key``."""
        slot = self._slots.get(key)
        return 0 if slot is None else slot.waiting

    def wanted(self, key: str) -> bool:
        """Whether a request in this process waits on ``key`` (an answer then reads what it needs)."""
        return key in self._slots

    def hand(self, key: str, ended: Invocation, online: bool | None) -> None:
        """After the commit that ended it: give ``ended`` to the requests waiting on ``key``, if any."""
        assert not ended.status.open
        slot = self._slots.get(key)
        if slot is not None:
            slot.ended = (ended, online)
