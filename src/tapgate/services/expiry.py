"""The expiry sweep: open invocations past their deadline resolve ``expired`` (tool.device_offline),
standing mandates past theirs are marked expired (``mandate.expired``), and console sign-ins past theirs
are deleted.

Readers expire what they find overdue themselves; the sweep catches the rest, at start-up and then on
an interval, tenant by tenant (sign-ins once a minute: they live ten).
"""

from __future__ import annotations

import asyncio
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


async def run_sweeper(ctx: Context, interval: float) -> None:
    """Sweep at once, then every ``interval`` seconds, until cancelled; a failed sweep is logged."""
    sign_ins_due = ctx.clock.now()
    while True:
        try:
            expired = await sweep(ctx)
            if expired:
                log.info("expired overdue invocations", extra={"count": expired})
            now = ctx.clock.now()
            if now >= sign_ins_due:
                sign_ins_due = now + SIGN_INS_EVERY
                deleted = await sweep_sign_ins(ctx)
                if deleted:
                    log.info("deleted expired console sign-ins", extra={"count": deleted})
        except Exception as e:
            log.error("expiry sweep failed", extra={"error": type(e).__name__})
        await asyncio.sleep(interval)


class Sweeper:
    def __init__(self, ctx: Context, interval: float = 1.0) -> None:
        self._ctx = ctx
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(run_sweeper(self._ctx, self._interval), name="tapgate-expiry")

    async def close(self) -> None:
        if self._task is not None:
            await tasks.stop(self._task)
