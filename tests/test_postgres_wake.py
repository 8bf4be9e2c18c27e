"""Wakes over PostgreSQL's LISTEN/NOTIFY: a notification committed by another process wakes this one's
waiters, and this process's own notifications, whose waiters were woken at commit, are not delivered a
second time by its listener (each waiter would read again for nothing)."""

from __future__ import annotations

import asyncio

import pytest

from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.wake.local import LocalWake
from tapgate.adapters.wake.postgres import PostgresListener
from tests.conftest import PostgresDatabase, tenant_name

BOUND = 10.0  # seconds: generous, the machine is shared


@pytest.mark.postgres
async def test_a_process_is_woken_once_by_its_own_commit_and_by_another_process_through_postgresql(
    postgres: PostgresDatabase,
) -> None:
    tenant = tenant_name()
    wake = LocalWake()
    heard: list[str | None] = []
    wake.listen(heard.append)
    here = open_sql_store(postgres.app_url, wake=wake)
    there = open_sql_store(postgres.app_url)  # another process: another origin
    listener = PostgresListener(postgres.app_url, wake, origin=here.origin)
    await listener.start()
    try:
        assert listener.connected.is_set()
        heard.clear()  # the listener's start wakes every waiter once
        ours, theirs = f"{tenant}:ours", f"{tenant}:theirs"
        with wake.subscribe(theirs) as woken:
            async with here.unit_of_work(tenant) as uow:
                uow.notify(ours)
            assert heard == [ours]  # at commit, in this process
            async with there.unit_of_work(tenant) as uow:
                uow.notify(theirs)
            await asyncio.wait_for(woken.wait(), timeout=BOUND)
        # NOTIFY is delivered in commit order: an echo of ours would have come before theirs.
        assert heard == [ours, theirs]
    finally:
        await listener.close()
        await here.close()
        await there.close()
