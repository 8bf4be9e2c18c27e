"""Waiters in this process: one event per waiter, set by a notification on its key."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from tapgate.flag import Flag
from tapgate.ports import Settable, Woken


class LocalWake:
    def __init__(self) -> None:
        self._waiters: defaultdict[str, set[Woken]] = defaultdict(set)
        # True while notifications from other processes may be missed (the listener is reconnecting):
        # waiters then also re-read every invocation_poll_seconds.
        self.degraded = False
        self._listeners: list[Callable[[str | None], None]] = []
        self._unswept: set[Woken] = set()  # waiters a sweep leaves alone (live links)

    def listen(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback`` with every notified key (None when every waiter is woken at once)."""
        self._listeners.append(callback)

    def subscribe(self, key: str, swept: bool = True, also: Settable | None = None) -> _Subscription:
        return _Subscription(self, key, swept, also)

    def notify(self, key: str) -> None:
        self._wake(key, ())

    def hand(self, key: str, values: Sequence[object]) -> None:
        self._wake(key, values)

    def committed(self, keys: Sequence[str], handed: Mapping[str, Sequence[object]]) -> None:
        """A unit of work committed: notify each of its keys, with what it handed on that key."""
        for key in keys:
            values = handed.get(key)
            if values:
                self.hand(key, values)
            else:
                self.notify(key)

    def handed(self, woken: Woken) -> list[object] | None:
        return woken.handed() if isinstance(woken, _AlsoSets) else None

    def _wake(self, key: str, values: Sequence[object]) -> None:
        for event in self._waiters.get(key, ()):
            if values and isinstance(event, _AlsoSets):
                event.hand(values)
            else:
                event.set()
        for callback in self._listeners:
            callback(key)

    def notify_all(self) -> None:
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()
        for callback in self._listeners:
            callback(None)

    def wake_waiters(self, but: Callable[[str], bool] = lambda _key: False, unswept: bool = False) -> None:
        """Wake every waiter whose key ``but`` does not exclude and that did not subscribe unswept (or,
        with ``unswept``, that did too), so it re-reads; the listeners are not told (a sweep: nothing is
        known to have changed)."""
        for key, waiters in self._waiters.items():
            if not but(key):
                for event in tuple(waiters) if unswept else waiters - self._unswept:
                    event.set()

    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())


class _Subscription:
    """A waiter's subscription to one key, as a context manager whose ``with`` gives its event. A class
    rather than a generator: a live link holds three for hours, and a generator's frame would cost each
    about 450 bytes more."""

    __slots__ = ("_also", "_event", "_key", "_swept", "_wake")

    def __init__(self, wake: LocalWake, key: str, swept: bool, also: Settable | None) -> None:
        self._wake, self._key, self._swept, self._also = wake, key, swept, also
        self._event: Woken | None = None

    def __enter__(self) -> Woken:
        event: Woken = Flag() if self._also is None else _AlsoSets(self._also)
        wake = self._wake
        wake._waiters[self._key].add(event)
        if not self._swept:
            wake._unswept.add(event)
        self._event = event
        return event

    def __exit__(self, *_: object) -> None:
        event, self._event = self._event, None
        if event is None:
            return
        wake = self._wake
        wake._unswept.discard(event)
        waiters = wake._waiters.get(self._key)
        if waiters is not None:
            waiters.discard(event)
            if not waiters:
                del wake._waiters[self._key]


class _AlsoSets:
    """A flag that sets another event with itself: one waiter on several keys waits on that event alone.
    It makes an event of its own only if something waits on it directly (a live link holds three of
    these for hours; an ``asyncio.Event`` each would cost about 750 bytes more)."""

    __slots__ = ("_also", "_event", "_handed", "_plain", "_value")

    def __init__(self, also: Settable) -> None:
        self._also = also
        self._value = False
        self._plain = False  # set by a notification that handed nothing since the last clear
        self._handed: list[object] | None = None
        self._event: Flag | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        self._plain = True
        self._set()

    def hand(self, values: Sequence[object]) -> None:
        if self._handed is None:
            self._handed = []
        self._handed.extend(values)
        self._set()

    def handed(self) -> list[object] | None:
        return None if self._plain else self._handed

    def _set(self) -> None:
        self._value = True
        self._also.set()
        if self._event is not None:
            self._event.set()

    def clear(self) -> None:
        self._value = self._plain = False
        self._handed = None
        if self._event is not None:
            self._event.clear()

    async def wait(self) -> Literal[True]:
        if self._value:
            return True
        if self._event is None:
            self._event = Flag()
        return await self._event.wait()
