"""What the tenant's chain head costs writers (no tenant-wide lock), in the bench's process.

Sixteen units of work at once, each journalling one entry and one event and committing, on a pool of
sixteen connections to PostgreSQL: all in one tenant (``chain-postgres-one``) against the same spread
over sixteen tenants (``chain-postgres-spread``), which share no head. Their ratio is what one tenant's
writers lose to each other. The two run in alternating turns so they share whatever else the machine
does; afterwards the one tenant's journal must verify whole, entry for entry.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bench.rows import BY_NAME, Row
from bench.servers import postgres_database

WRITERS = 16
TURNS = 3


@dataclass
class _Count:
    commits: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.commits / self.seconds if self.seconds else 0.0


async def chain_rows(admin_url: str, seconds: float) -> tuple[Row, Row]:
    """``chain-postgres-spread`` and ``chain-postgres-one``, each over ``seconds`` in all."""
    from tapgate.adapters.clock import SystemClock
    from tapgate.adapters.store.sql import open_sql_store
    from tapgate.domain.audit import AuditRecord
    from tapgate.services import accounts
    from tapgate.services.journal import verify_audit

    async with postgres_database(admin_url) as url:
        store = open_sql_store(url, pool_size=WRITERS)
        clock = SystemClock()
        try:
            tenants = []
            for n in range(WRITERS):
                tenant_id = f"chain-{n}"
                operator = await accounts.create_tenant(store, clock, tenant_id)
                caller = await accounts.authenticate(store, operator.token)
                await accounts.create_user(store, clock, caller, "ana", None)
                tenants.append(tenant_id)

            written = dict.fromkeys(tenants, 0)  # entries journalled per tenant, in either turn

            async def writer(tenant_id: str, deadline: float, count: _Count) -> None:
                while time.perf_counter() < deadline:
                    async with store.unit_of_work(tenant_id) as uow:
                        await uow.journal.append(AuditRecord("bench.wrote", "bench"), clock.now())
                        await uow.events.append("ana", "bench.wrote", {}, clock.now())
                    count.commits += 1
                    written[tenant_id] += 1

            async def turn(chosen: list[str], count: _Count) -> None:
                started = time.perf_counter()
                deadline = started + seconds / (2 * TURNS)
                await asyncio.gather(*(writer(tenant_id, deadline, count) for tenant_id in chosen))
                count.seconds += time.perf_counter() - started

            before = await verify_audit(store, tenants[0])
            one, spread = _Count(), _Count()
            for _ in range(TURNS):
                await turn([tenants[0]] * WRITERS, one)
                await turn(tenants, spread)
            chained = await verify_audit(store, tenants[0])
        finally:
            await store.close()
    detail = {"writers": WRITERS, "pool": WRITERS, "turns": TURNS, "per": "commit: one entry and one event"}
    spread_row = Row(BY_NAME["chain-postgres-spread"], value=round(spread.rate, 1), detail=dict(detail))
    one_row = Row(
        BY_NAME["chain-postgres-one"],
        value=round(one.rate, 1),
        # The spread turns write to the first tenant too: its journal holds every entry of both.
        detail=detail | {"journal_verified": chained == before + written[tenants[0]], "entries": chained},
    )
    return spread_row, one_row
