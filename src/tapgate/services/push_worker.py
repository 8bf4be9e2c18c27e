"""The push worker: one per gateway process, woken when an outbox row commits (in any process, on
PostgreSQL), and looking again on its own when a row's moment comes and every ``push_sweep_seconds``.

It goes tenant by tenant (row-level security gives each transaction one tenant). It claims no more rows
than it has free sending slots, so a claimed row never waits in this process while its lease runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from tapgate import tasks
from tapgate.ports import PushSender, Woken
from tapgate.services.context import TENANTS_KEY, Context, outbox_key
from tapgate.services.outbox import PushStats, Send, claim, send

log = logging.getLogger(__name__)
BATCH = 100
CONCURRENCY = 32  # sends in flight at once
CLOSE_GRACE_SECONDS = 2.0  # sends in flight at shutdown get this long; the rest go out after a restart
MIN_LOOK_SECONDS = 0.05


class PushWorker(tasks.Periodic):
    """Start it with ``start``; ``run_once`` sends everything due now and waits for it (tests, tools)."""

    def __init__(self, ctx: Context, sender: PushSender, concurrency: int = CONCURRENCY) -> None:
        # A round that fails (the database may be away for a while) is tried again a moment later.
        super().__init__(
            "tapgate-push", self._round, self._until_due, failed="push worker round failed", log=log
        )
        self.ctx = ctx
        self.sender = sender
        self.stats = PushStats()
        self._concurrency = concurrency
        self._in_flight: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._backlog: set[str] = set()  # tenants with more due rows than there were free slots
        self._subscriptions = contextlib.ExitStack()  # to the tenants and their outboxes, while it runs
        self._tenants_changed: Woken | None = None
        self._woken: dict[str, Woken] = {}  # each tenant's outbox
        self._look_at: dict[str, float] = {}  # loop time of each tenant's next look
        self._refresh_at = 0.0

    async def start(self) -> None:
        self._slot_freed = asyncio.Event()  # bound to the loop that runs the gateway
        self._tenants_changed = self._subscriptions.enter_context(self.ctx.wake.subscribe(TENANTS_KEY))
        await super().start()

    async def close(self) -> None:
        await super().close()
        self._subscriptions.close()
        self._woken.clear()
        self._look_at.clear()
        self._refresh_at = 0.0
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=CLOSE_GRACE_SECONDS)
        for task in set(self._in_flight):
            await tasks.stop(task)  # its row stays claimed until the lease lapses, then goes out again

    async def run_once(self) -> None:
        """Claim and send every row due now, in every tenant, and wait until each send is recorded."""
        tenants = set(await self.ctx.store.tenant_ids())
        while True:
            for tenant_id in sorted(tenants):
                await self.dispatch(tenant_id)
            if self._in_flight:
                await asyncio.wait(set(self._in_flight))
            if not self._backlog:
                return
            tenants = set(self._backlog)

    async def dispatch(self, tenant_id: str) -> float | None:
        """Claim the tenant's due rows into free slots; return the seconds until its next row is due
        (None: nothing queued, or every slot busy: the tenant waits for one in the backlog)."""
        self._backlog.discard(tenant_id)
        next_due = None
        while True:
            free = min(BATCH, self._concurrency - len(self._in_flight))
            if free <= 0:
                self._backlog.add(tenant_id)
                return None
            claimed = await claim(self.ctx, self.sender, tenant_id, free, self.stats)
            for out in claimed.sends:
                self._spawn(out)
            next_due = claimed.next_due
            if claimed.rows < free:
                break
        if next_due is None:
            return None
        return max(0.0, (next_due - self.ctx.clock.now()).total_seconds())

    def _spawn(self, out: Send) -> None:
        task = asyncio.create_task(send(self.ctx, self.sender, out, self.stats), name="tapgate-push-send")
        self._in_flight.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("push send failed", extra={"error": type(task.exception()).__name__})

    def _sweep_seconds(self) -> float:
        sweep = self.ctx.limits.push_sweep_seconds
        if self.ctx.wake.degraded:  # notifications may be missed: look more often
            sweep = min(sweep, self.ctx.limits.invocation_poll_seconds)
        return sweep

    async def _round(self) -> None:
        """Send what is due in each tenant whose outbox was notified, has a backlog or is due a look."""
        loop = asyncio.get_running_loop()
        sweep = self._sweep_seconds()
        assert self._tenants_changed is not None  # started
        if self._tenants_changed.is_set() or loop.time() >= self._refresh_at:
            # Subscribe before the first look, so no row committed in between is missed.
            self._tenants_changed.clear()
            for tenant_id in await self.ctx.store.tenant_ids():
                if tenant_id not in self._woken:
                    self._woken[tenant_id] = self._subscriptions.enter_context(
                        self.ctx.wake.subscribe(outbox_key(tenant_id))
                    )
                    self._look_at[tenant_id] = loop.time()
            self._refresh_at = loop.time() + sweep
        self._slot_freed.clear()
        for tenant_id, event in self._woken.items():
            if event.is_set() or tenant_id in self._backlog or loop.time() >= self._look_at[tenant_id]:
                event.clear()
                due_in = await self.dispatch(tenant_id)
                # A row due now yet unclaimed is locked by another transaction: look soon.
                wait = sweep if due_in is None else max(MIN_LOOK_SECONDS, min(sweep, due_in))
                self._look_at[tenant_id] = loop.time() + wait

    async def _until_due(self, failed: bool) -> None:
        """Until a notification, a freed slot for a backlog, or the next look that is due."""
        if failed:
            await asyncio.sleep(min(self._sweep_seconds(), 1.0))
            return
        assert self._tenants_changed is not None  # started
        waiting = [self._tenants_changed, *self._woken.values()]
        if self._backlog:
            waiting.append(self._slot_freed)
        until = min([self._refresh_at, *self._look_at.values()])
        await _first_of(waiting, max(0.0, until - asyncio.get_running_loop().time()))


async def _first_of(events: Iterable[Woken], seconds: float) -> None:
    """Wait until one of ``events`` is set, or ``seconds`` have passed."""
    events = list(events)
    if any(event.is_set() for event in events):
        return
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
