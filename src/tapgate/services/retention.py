"""Retention: after ``retention_days`` the message bodies tapgate held for a person are
erased: forwarded SMS bodies (and their senders), the arguments of ``sms_send`` and ``phone_actions``
calls (on the call, and on the approval that showed them), and every result text. Rows, argument
digests, receipts and the audit journal stay, so what happened can still be told and verified; what was
said cannot. A notice held for a device with no push target is let go once ``notice_life_seconds`` pass
(its row finished, its payload dropped): no later link sends it.

Events are numbered in commit order, so the sweeper remembers, tenant by tenant, the number up to which
every event was old at its last round (``Pruned.events_through``): each later round looks only at the
events after it, up to the first that is not old yet. The first round of a process, and ``tapgate
prune``, look at every event, so a message stamped old but numbered after a younger one (a clock set
forward and back) waits at most until then, or until that younger one is old."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from tapgate import tasks
from tapgate.domain.capabilities import MESSAGE_CAPABILITIES
from tapgate.domain.events import INGEST_MESSAGE
from tapgate.services.context import Context

log = logging.getLogger(__name__)
FIELDS = ("body", "sender")  # what a forwarded message holds of what was said, and by whom
EVERY_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Pruned:
    invocations: int = 0
    events: int = 0
    notices: int = 0
    events_through: Mapping[str, int] = field(default_factory=dict)  # by tenant: all old up to here


async def prune(ctx: Context, events_after: Mapping[str, int] | None = None) -> Pruned:
    """Erase every body older than the retention period now, tenant by tenant; ``events_after`` (by
    tenant, an earlier round's ``events_through``) keeps the search of events to those numbered after."""
    now = ctx.clock.now()
    before = now - timedelta(days=ctx.limits.retention_days)
    notices_before = now - timedelta(seconds=ctx.limits.notice_life_seconds)
    invocations = events = notices = 0
    through: dict[str, int] = {}
    for tenant_id in await ctx.store.tenant_ids():
        after = (events_after or {}).get(tenant_id)
        async with ctx.store.unit_of_work(tenant_id) as uow:
            # Events first: erasing them may wait for the tenant's chain head (sealing what is pending),
            # and must not wait while this transaction holds rows a writer holding the head may need.
            erased, through[tenant_id] = await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, before, after)
            events += erased
            invocations += await uow.invocations.erase_texts(before, MESSAGE_CAPABILITIES)
            invocations += await uow.approvals.erase_texts(before, MESSAGE_CAPABILITIES)
            notices += await uow.outbox.expire_held(notices_before)
    return Pruned(invocations, events, notices, through)


class RetentionSweeper(tasks.Periodic):
    """Prunes once an hour in the background (and once at start)."""

    def __init__(self, ctx: Context, every: float = EVERY_SECONDS) -> None:
        super().__init__(
            "tapgate-retention", self._round, tasks.every(every), failed="retention prune failed", log=log
        )
        self._ctx = ctx
        self.events_through: Mapping[str, int] = {}  # by tenant, from the last round

    async def sweep(self) -> Pruned:
        """One round: erase what became older than the retention period since the last one."""
        pruned = await prune(self._ctx, self.events_through)
        self.events_through = pruned.events_through
        return pruned

    async def _round(self) -> None:
        pruned = await self.sweep()  # one that fails is tried again at the next round
        if pruned.invocations or pruned.events or pruned.notices:
            log.info(
                "erased old bodies",
                extra={"invocations": pruned.invocations, "events": pruned.events, "notices": pruned.notices},
            )
