"""Two push workers on one database (two gateway processes, as far as the database can tell) never send
one outbox row twice."""

from __future__ import annotations

import asyncio
import contextlib
import json

import anyio
import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.wake.local import LocalWake
from tapgate.domain.principals import TokenKind
from tapgate.services import accounts, devices, notices
from tapgate.services.context import Context, Limits
from tapgate.services.push_worker import PushWorker
from tests.conftest import new_postgres_database, tenant_name
from tests.pushfakes import PushFakes
from tests.pushworld import push_router
from tests.world import LAMP, device_body

USERS = 6
DEVICES = 5  # per user
EVENTS = ("goal.blocked", "goal.done", "memory.proposed", "suggestion.proposed", "run.finished", "run.failed")
# Every row its own push: no pause between pushes to a device, no cap to stop them.
LIMITS = Limits(push_coalesce_seconds=0, push_cap=10_000)


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_two_workers_on_one_database_send_every_row_exactly_once(
    engine: str,
    request: pytest.FixtureRequest,
    fakes: PushFakes,
    push_http: httpx.AsyncClient,
    push_clock: FrozenClock,
) -> None:
    # A database of its own: run_once claims every tenant's due rows, and other tests leave rows queued.
    own = contextlib.ExitStack()
    url = (
        request.getfixturevalue("sqlite_url")
        if engine == "sqlite"
        else own.enter_context(contextlib.contextmanager(new_postgres_database)()).app_url
    )
    stores = [open_sql_store(url), open_sql_store(url)]
    try:
        ctxs = [Context(store, push_clock, LocalWake(), LIMITS, device_channel=True) for store in stores]
        rows = await _queue_notices(ctxs[0], push_clock)
        workers = [PushWorker(ctx, push_router(push_http, fakes, push_clock), concurrency=8) for ctx in ctxs]
        with anyio.fail_after(60):
            await asyncio.gather(*(worker.run_once() for worker in workers))
    finally:
        for store in stores:
            await store.close()
        own.close()

    delivered = [json.loads(seen.body)["delivery_id"] for seen in fakes.route_seen("relay")]
    assert len(delivered) == len(set(delivered)) == rows == USERS * DEVICES * len(EVENTS)
    assert fakes.hits["replayed"] == 0  # the relay never saw a delivery id twice
    assert all(worker.stats.sent > 0 for worker in workers)  # both took their share
    assert sum(worker.stats.sent for worker in workers) == rows


async def _queue_notices(ctx: Context, clock: FrozenClock) -> int:
    """A tenant whose people each have devices with push targets, and a notice of every kind for each."""
    operator_token = await accounts.create_tenant(ctx.store, clock, tenant_name())
    operator = await accounts.authenticate(ctx.store, operator_token.token)
    queued = 0
    for u in range(USERS):
        user = f"user-{u}"
        await accounts.create_user(ctx.store, clock, operator, user, None)
        for d in range(DEVICES):
            body = device_body(f"phone-{d}", [LAMP], push={"kind": "fcm", "token": f"fcm-{u}-{d}"})
            await devices.enrol(ctx.store, clock, operator, user, body, 10)
        agent_token = await accounts.create_token(ctx.store, clock, operator, user, TokenKind.AGENT)
        agent = await accounts.authenticate(ctx.store, agent_token.token)
        for event in EVENTS:
            queued += len(await notices.send_notice(ctx, agent, event, None, {"run_id": "r-1"}, None))
    return queued
