"""When the long-poll handed each call to its device, remembered in this process and written in batches,
so that a device's fetch commits nothing while work it holds is not handed again for
``redelivery_seconds``.

The long-poll reads when a call was handed over to leave it out until its redelivery is due. That mark
used to be written by the fetch itself: a writing transaction per call, for a device that polls. Now the
fetch notes it here, where this process's next fetch reads it at once, and a batch writes the marks of
every device of a tenant in one unit of work a moment later (``flush_seconds``), where other gateways read
them. A device with a push target is the exception: its mark withholds the push of a call it already has,
so its fetch still writes it (as a live link does, ``answering.take_pending``). Marks not yet written when
the process stops are lost, which only hands those calls once more: a device answers each call once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from tapgate import tasks
from tapgate.domain.errors import TapgateError
from tapgate.services.context import Context

log = logging.getLogger(__name__)
FLUSH_SECONDS = 0.5


class HandedCalls(tasks.Periodic):
    def __init__(self, ctx: Context, flush_seconds: float = FLUSH_SECONDS) -> None:
        super().__init__(
            "tapgate-handed",
            self.flush,
            self._gather,
            failed="handed calls not written",
            log=log,
            at_start=False,
            level=logging.WARNING,
        )
        self.ctx = ctx
        self.flush_seconds = flush_seconds
        self._at: dict[tuple[str, str], datetime] = {}  # (tenant, invocation id) -> when it was handed
        # by tenant, then by (user, device, when handed): the calls' ids
        self._unwritten: defaultdict[str, dict[tuple[str, str, datetime], list[str]]] = defaultdict(dict)
        self._flushed = asyncio.Event()
        self.batches = 0  # units of work that wrote marks

    def handed_at(self, tenant_id: str, invocation_id: str, written: datetime | None) -> datetime | None:
        """When the call was last handed over: the later of its written mark and this process's own."""
        noted = self._at.get((tenant_id, invocation_id))
        if noted is None or (written is not None and written >= noted):
            return written
        return noted

    def note(
        self, tenant_id: str, user_id: str, device_uid: str, invocation_ids: Iterable[str], at: datetime
    ) -> None:
        """``invocation_ids`` (calls of ``user_id``) were handed to the device at ``at``; written with the
        next batch."""
        ids = list(invocation_ids)
        for invocation_id in ids:
            self._at[(tenant_id, invocation_id)] = at
        self._unwritten[tenant_id].setdefault((user_id, device_uid, at), []).extend(ids)
        self._flushed.set()

    def __len__(self) -> int:
        return len(self._at)

    async def flush(self) -> int:
        """Write every unwritten mark, one unit of work per tenant; forget marks past their redelivery.
        How many marks were written."""
        unwritten, self._unwritten = self._unwritten, defaultdict(dict)
        written = 0
        try:
            for tenant, marks in list(unwritten.items()):
                async with self.ctx.store.unit_of_work(tenant) as uow:
                    for (user_id, device_uid, at), ids in marks.items():
                        await uow.invocations.mark_delivered(user_id, device_uid, ids, at)
                        written += len(ids)
                self.batches += 1
                del unwritten[tenant]
        finally:
            for tenant, marks in unwritten.items():  # not written (the database is away): kept for the next
                for key, ids in marks.items():
                    self._unwritten[tenant].setdefault(key, []).extend(ids)
        past = self.ctx.clock.now() - timedelta(seconds=self.ctx.limits.redelivery_seconds)
        self._at = {key: at for key, at in self._at.items() if at > past}
        return written

    async def close(self) -> None:
        await super().close()
        try:
            await self.flush()
        except TapgateError as e:
            log.warning("handed calls not written", extra={"error": type(e).__name__})

    async def _gather(self, failed: bool) -> None:
        """Until a call is noted (or the last batch failed: the database is away, and the next batch
        tries again), then ``flush_seconds`` more: the batch gathers what comes meanwhile."""
        if failed:
            self._flushed.set()
        await self._flushed.wait()
        self._flushed.clear()
        await asyncio.sleep(self.flush_seconds)
