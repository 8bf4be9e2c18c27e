"""When each token was last used, kept off the request path: a request only notes the time in memory,
and a token's ``last_used_at`` is written at most once a minute, in one transaction per tenant for a
whole batch of tokens."""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from datetime import datetime

from tapgate import tasks
from tapgate.domain.errors import TapgateError
from tapgate.domain.principals import Principal
from tapgate.ports import Clock, Store

log = logging.getLogger(__name__)
EVERY_SECONDS = 60.0  # a token's last_used_at moves at most this often
FLUSH_SECONDS = 15.0  # how often noted uses are written


class UsageRecorder(tasks.Periodic):
    """Notes uses in memory; writes them every ``FLUSH_SECONDS`` in the background, and at close."""

    def __init__(self, store: Store, clock: Clock, every: float = EVERY_SECONDS) -> None:
        super().__init__(
            "tapgate-token-usage",
            self.flush,
            tasks.every(FLUSH_SECONDS),
            failed="token uses not recorded",
            log=log,
            at_start=False,
            level=logging.WARNING,
        )
        self._store = store
        self._clock = clock
        self._every = every
        self._written: dict[tuple[str, str], datetime] = {}
        self._due: dict[tuple[str, str], datetime] = {}

    def seen(self, principal: Principal) -> None:
        """Note a use now; a dictionary lookup, no I/O."""
        key = (principal.tenant_id, principal.credential_id)
        if key in self._due:
            return
        now = self._clock.now()
        last = self._written.get(key)
        if last is None or (now - last).total_seconds() >= self._every:
            self._due[key] = now

    async def flush(self) -> None:
        """Write every noted use: one unit of work per tenant."""
        due, self._due = self._due, {}
        by_tenant: defaultdict[str, dict[str, datetime]] = defaultdict(dict)
        for (tenant, credential_id), at in due.items():
            by_tenant[tenant][credential_id] = at
            self._written[(tenant, credential_id)] = at
        for tenant, used in by_tenant.items():
            try:
                async with self._store.unit_of_work(tenant) as uow:
                    await uow.credentials.touch(used)
            except Exception as e:  # a lost timestamp must never stop the writer
                log.warning("token use not recorded", extra={"error": type(e).__name__, "tokens": len(used)})
        if len(self._written) > 100_000:
            self._written.clear()

    async def close(self) -> None:
        await super().close()
        with contextlib.suppress(TapgateError):
            await self.flush()
