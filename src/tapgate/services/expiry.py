"""The expiry sweep: open invocations past their deadline resolve ``expired`` (tool.device_offline),
standing mandates past theirs are marked expired (``mandate.expired``), and console sign-ins past theirs
are deleted.

Readers expire what they find overdue themselves; the sweep catches the rest, at start-up and then on
an interval, tenant by tenant (sign-ins once a minute: they live ten).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from tapgate import faults, tasks
from tapgate.services.console import sweep_sign_ins
from tapgate.services.context import Context
from tapgate.services.endings import expire
from tapgate.services.mandates import sweep_expired

log = logging.getLogger(__name__)
BATCH = 200
SIGN_INS_EVERY = timedelta(minutes=1)  # between two deletions of expired console sign-ins


async def sweep(ctx: Context) -> int:
    """Expire every overdue invocation now; return how many."""
    now = ctx.clock.now()
    count = 0
    for tenant_id in await ctx.store.tenant_ids():
        while True:
            async with ctx.store.unit_of_work(tenant_id) as uow:
                due = await uow.invocations.due(now, BATCH)
            for invocation in due:
                await expire(ctx, invocation, now)
                faults.crash_point("expiry.sweep")
            count += len(due)
            if len(due) < BATCH:
                break
        while await sweep_expired(ctx, tenant_id, BATCH) == BATCH:  # announced, not counted as calls
            pass
    return count


class Sweeper(tasks.Periodic):
    """Sweeps at once, then every ``interval`` seconds, in the background."""

    def __init__(self, ctx: Context, interval: float = 1.0) -> None:
        super().__init__(
            "tapgate-expiry", self._round, tasks.every(interval), failed="expiry sweep failed", log=log
        )
        self._ctx = ctx
        self._sign_ins_due = ctx.clock.now()

    async def _round(self) -> None:
        expired = await sweep(self._ctx)
        if expired:
            log.info("expired overdue invocations", extra={"count": expired})
        now = self._ctx.clock.now()
        if now >= self._sign_ins_due:
            self._sign_ins_due = now + SIGN_INS_EVERY
            deleted = await sweep_sign_ins(self._ctx)
            if deleted:
                log.info("deleted expired console sign-ins", extra={"count": deleted})
