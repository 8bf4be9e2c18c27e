"""The live device links this process holds, so that an idle link costs the database nothing.

A link's device is marked held (``link_until``) when it connects and released when it closes; while it is
open, this registry renews every held link of the process in a few batched units of work per interval
(one per tenant and batch), instead of each link writing its own every 25 s. A link re-checks its
device's credential only when woken: by its device's key (new work, a revocation of the device) or by its
tenant's ``auth`` key (a credential or device changed, in any process), which the registry relays to the
tenant's links — never on a timer. While notifications may be missed the links poll as every waiter does.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from tapgate import tasks
from tapgate.ports import Woken
from tapgate.services.authcache import AUTH_SUFFIX
from tapgate.services.context import Context

log = logging.getLogger(__name__)
HOLD_SECONDS = 60.0  # a held link counts as live this long after its last renewal
RENEW_SECONDS = 25.0
BATCH = 500  # links renewed per unit of work (one statement)


class LiveLinks(tasks.Periodic):
    def __init__(
        self, ctx: Context, renew_seconds: float = RENEW_SECONDS, hold_seconds: float = HOLD_SECONDS
    ) -> None:
        super().__init__(
            "tapgate-link-renewal",
            self.renew,  # one that fails (the database is away) is tried again at the next round
            tasks.every(lambda: self.renew_seconds),
            failed="link renewal failed",
            log=log,
            at_start=False,
            level=logging.WARNING,
        )
        self.ctx = ctx
        self.renew_seconds = renew_seconds
        self.hold_seconds = hold_seconds
        # A list per device (usually of one link: 64 bytes where a set is 216).
        self._links: defaultdict[str, dict[str, list[Woken]]] = defaultdict(dict)
        self._sent: dict[tuple[str, str], frozenset[str]] = {}  # the calls each device's links hold
        self._full: set[tuple[str, str]] = set()  # devices whose links were sent a whole page of calls
        ctx.wake.listen(self._on_notify)

    def __len__(self) -> int:
        return sum(len(events) for devices in self._links.values() for events in devices.values())

    def holding(self, tenant_id: str, device_uid: str, woken: Woken) -> _Holding:
        """Count the link as live, renew its hold, and set ``woken`` when its tenant's credentials change
        (a context manager)."""
        return _Holding(self, tenant_id, device_uid, woken)

    def _hold(self, tenant_id: str, device_uid: str, woken: Woken) -> None:
        self._links[tenant_id].setdefault(device_uid, []).append(woken)

    def _release(self, tenant_id: str, device_uid: str, woken: Woken) -> None:
        devices = self._links.get(tenant_id, {})
        events = devices.get(device_uid)
        if events is not None and woken in events:
            events.remove(woken)
            if not events:
                del devices[device_uid]
        if not devices:
            self._links.pop(tenant_id, None)
        if device_uid not in devices:
            self._sent.pop((tenant_id, device_uid), None)
            self._full.discard((tenant_id, device_uid))

    def note_sent(
        self, tenant_id: str, device_uid: str, call_ids: frozenset[str], full: bool = False
    ) -> None:
        """The calls the device's live link holds now (it was sent them and they are still pending);
        ``full``: they were a whole page, and more may be waiting past it."""
        key = (tenant_id, device_uid)
        if call_ids:
            self._sent[key] = call_ids
        else:  # an idle link's: nothing kept
            self._sent.pop(key, None)
        if full:
            self._full.add(key)
        else:
            self._full.discard(key)

    def answered(self, tenant_id: str, device_uid: str) -> None:
        """The device answered a call on a link of this process. If its links hold a whole page they read
        again, since a call past the page may fit now; otherwise an answer wakes nobody (the links hold
        every pending call already, and a read per answer would cost every call a transaction)."""
        if (tenant_id, device_uid) in self._full:
            for event in self._links.get(tenant_id, {}).get(device_uid, ()):
                event.set()

    def held(self, tenant_id: str, device_uid: str) -> frozenset[str]:
        """The calls a live link of this process holds for the device: a long-poll does not hand them
        again (the link has them, with no database write to say so)."""
        return self._sent.get((tenant_id, device_uid), frozenset())

    def _on_notify(self, key: str | None) -> None:
        if key is None:
            tenants = list(self._links)
        elif key.endswith(AUTH_SUFFIX):
            tenants = [key[: -len(AUTH_SUFFIX)]]
        else:
            return
        for tenant in tenants:
            for events in self._links.get(tenant, {}).values():
                for event in events:
                    event.set()

    async def renew(self) -> int:
        """Hold every live link of this process for ``hold_seconds`` more; how many were renewed."""
        until = self.ctx.clock.now() + timedelta(seconds=self.hold_seconds)
        renewed = 0
        for tenant, devices in list(self._links.items()):
            uids = list(devices)
            for start in range(0, len(uids), BATCH):
                async with self.ctx.store.unit_of_work(tenant) as uow:
                    await uow.devices.hold_links(uids[start : start + BATCH], until)
                renewed += len(uids[start : start + BATCH])
        return renewed


class _Holding:
    """``LiveLinks.holding``: a class rather than a generator, whose frame would cost each link (held for
    hours) about 450 bytes more."""

    __slots__ = ("_device_uid", "_links", "_tenant_id", "_woken")

    def __init__(self, links: LiveLinks, tenant_id: str, device_uid: str, woken: Woken) -> None:
        self._links, self._tenant_id, self._device_uid, self._woken = links, tenant_id, device_uid, woken

    def __enter__(self) -> None:
        self._links._hold(self._tenant_id, self._device_uid, self._woken)

    def __exit__(self, *_: object) -> None:
        self._links._release(self._tenant_id, self._device_uid, self._woken)
