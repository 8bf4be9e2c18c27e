"""Who a token is, remembered for a few seconds so a busy device or agent does not pay a database read
on every request.

An entry is dropped the moment anything about its tenant's credentials or devices changes (a revoked
device, a decided pairing), in this process or any other (the notification ``<tenant>:auth``), and the
cache is bypassed while notifications may be missed. So a revoked device still fails its very next
request (gate G7), as it does without the cache.

A read that was under way when such a notification came may have seen the row before the change; what it
read is not kept (``epoch`` before the read, ``keep(..., since=)`` after it), or a revocation that another
process announced mid-read would be forgotten for a whole ``ttl``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from tapgate.domain.principals import Principal
from tapgate.services.devices import DeviceCaller

AUTH_SUFFIX = ":auth"  # see context.auth_key


@dataclass(slots=True)
class _Entry:
    principal: Principal
    device: DeviceCaller | None
    stored: float
    touched: float  # when the device's presence was last written


class AuthCache:
    """``now`` gives seconds on the gateway's clock, so tests and simulations that move the clock move
    the cache with it."""

    def __init__(
        self,
        now: Callable[[], float],
        ttl: float = 30.0,
        touch_every: float = 30.0,
        max_entries: int = 50_000,
    ) -> None:
        self._now = now
        self.ttl = ttl
        self.touch_every = touch_every
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._epoch = 0  # moves with every notification that drops entries

    def epoch(self) -> int:
        """Take this before reading a token from the database, and pass it to ``keep``."""
        return self._epoch

    def principal(self, token: str) -> Principal | None:
        entry = self._fresh(token)
        return entry.principal if entry else None

    def device(self, token: str) -> DeviceCaller | None:
        """The revalidated device, unless its presence is due to be written again."""
        entry = self._fresh(token)
        if entry is None or entry.device is None or self._now() - entry.touched > self.touch_every:
            return None
        return entry.device

    def keep(
        self, token: str, principal: Principal, device: DeviceCaller | None = None, *, since: int
    ) -> None:
        """Remember what was read, unless a notification came since ``since`` (it may be stale)."""
        if since != self._epoch:
            return
        now = self._now()
        old = self._entries.pop(token, None)
        touched = now if device is not None else (old.touched if old else 0.0)
        self._entries[token] = _Entry(principal, device or (old.device if old else None), now, touched)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def on_notify(self, key: str | None) -> None:
        if key is None:
            self._epoch += 1
            self._entries.clear()
        elif key.endswith(AUTH_SUFFIX):
            self._epoch += 1
            tenant = key[: -len(AUTH_SUFFIX)]
            for token in [t for t, e in self._entries.items() if e.principal.tenant_id == tenant]:
                del self._entries[token]

    def clear(self) -> None:
        self._epoch += 1
        self._entries.clear()

    def _fresh(self, token: str) -> _Entry | None:
        entry = self._entries.get(token)
        if entry is None:
            return None
        if self._now() - entry.stored > self.ttl:
            del self._entries[token]
            return None
        return entry
