"""Idle is idle (DESIGN §16): a process renews its live links' holds in batches, and a link is woken for
its credential only by a change in its tenant, never by a timer."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.counting import COUNTS
from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.wake.local import LocalWake
from tapgate.domain.accounts import Tenant, User
from tapgate.domain.devices import Device, DeviceStatus
from tapgate.services.context import Context, auth_key, device_key
from tapgate.services.links import LiveLinks
from tests.conftest import tenant_name

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


async def _devices(ctx: Context, count: int) -> tuple[str, list[str]]:
    tenant = tenant_name()
    uids = [f"{n:016x}" for n in range(count)]
    async with ctx.store.unit_of_work(tenant) as uow:
        await uow.tenants.add(Tenant(tenant, tenant, NOW))
        await uow.users.add(User(tenant, "ana", "Ana", NOW))
        for n, uid in enumerate(uids):
            await uow.devices.add(
                Device(tenant, "ana", uid, f"d{n}", "D", "lamp", "ed25519", "AAAA", DeviceStatus.ACTIVE, NOW)
            )
    return tenant, uids


async def test_every_live_link_is_renewed_in_one_transaction_per_batch_not_one_per_link(
    sqlite_url: str,
) -> None:
    wake = LocalWake()
    store = open_sql_store(sqlite_url, wake=wake)
    clock = FrozenClock(NOW)
    ctx = Context(store, clock, wake, device_channel=True)
    links = LiveLinks(ctx)
    with contextlib.ExitStack() as held_links:
        tenant, uids = await _devices(ctx, 120)
        for uid in uids:
            held_links.enter_context(links.holding(tenant, uid, asyncio.Event()))
        assert len(links) == 120
        clock.advance(30)
        before = COUNTS.transactions
        assert await links.renew() == 120
        assert COUNTS.transactions - before == 1
        async with store.unit_of_work(tenant) as uow:
            held = [await uow.devices.by_uid(uid) for uid in uids]
        assert {d.link_until for d in held if d} == {NOW + timedelta(seconds=30 + links.hold_seconds)}
    await store.close()


async def test_a_credential_change_in_the_tenant_wakes_its_links_and_no_others() -> None:
    from tapgate.adapters.store.memory import MemoryStore

    wake = LocalWake()
    ctx = Context(MemoryStore(wake), FrozenClock(NOW), wake, device_channel=True)
    links = LiveLinks(ctx)
    mine, theirs = asyncio.Event(), asyncio.Event()
    with links.holding("t-a", "a" * 16, mine), links.holding("t-b", "b" * 16, theirs):
        wake.notify(device_key("t-a", "c" * 16))  # another device's new work: nobody here
        assert not mine.is_set() and not theirs.is_set()
        wake.notify(auth_key("t-a"))
        assert mine.is_set() and not theirs.is_set()
        wake.notify_all()  # notifications may have been missed: everyone re-checks
        assert theirs.is_set()
    assert len(links) == 0


async def test_a_closed_link_is_no_longer_renewed(sqlite_url: str) -> None:
    wake = LocalWake()
    store = open_sql_store(sqlite_url, wake=wake)
    ctx = Context(store, FrozenClock(NOW), wake, device_channel=True)
    links = LiveLinks(ctx)
    try:
        tenant, [uid] = await _devices(ctx, 1)
        with links.holding(tenant, uid, asyncio.Event()):
            assert await links.renew() == 1
        before = COUNTS.transactions
        assert await links.renew() == 0
        assert COUNTS.transactions == before
    finally:
        await store.close()
