"""The Store contract for standing mandates, on the memory store, SQLite and PostgreSQL: the same answers,
and a use spent once however many calls race for it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tapgate.domain.accounts import Tenant, User
from tapgate.domain.errors import Conflict
from tapgate.domain.mandates import Mandate, MandateStatus
from tapgate.ports import Store
from tests.conftest import tenant_name

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


async def _world(store: Store) -> str:
    tenant = tenant_name()
    async with store.unit_of_work(tenant) as uow:
        await uow.tenants.add(Tenant(tenant, tenant, NOW))
        for user in ("ana", "bob"):
            await uow.users.add(User(tenant, user, user.title(), NOW))
    return tenant


def _mandate(tenant: str, mandate_id: str = "mnd_1", **changes: object) -> Mandate:
    mandate = Mandate(
        tenant_id=tenant,
        mandate_id=mandate_id,
        user_id="ana",
        agent_id="claude",
        tools=("device__ana_phone__sms_send",),
        constraints={"to": {"one_of": ["+447700900001", "+447700900002"]}},
        max_calls=3,
        per_day=2,
        purpose="texts to family",
        created_at=NOW,
        expires_at=NOW + timedelta(days=7),
        sign_until=NOW + timedelta(minutes=5),
        approval_id="apr_1",
    )
    return replace(mandate, **changes)  # type: ignore[arg-type]


async def _signed(store: Store, tenant: str, **changes: object) -> Mandate:
    mandate = _mandate(tenant, **changes)
    async with store.unit_of_work(tenant) as uow:
        await uow.mandates.add(mandate)
        assert await uow.mandates.set_status(
            mandate.mandate_id, MandateStatus.AWAITING_SIGNATURE, MandateStatus.ACTIVE, NOW, "device:p"
        )
    return mandate


async def test_a_mandate_round_trips_per_tenant_and_is_added_once(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.mandates.add(_mandate(tenant))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.mandates.get("mnd_1") == _mandate(tenant)
        assert await uow.mandates.get("mnd_2") is None
    async with store.unit_of_work(tenant_name()) as uow:
        assert await uow.mandates.get("mnd_1") is None
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.mandates.add(_mandate(tenant))


async def test_mandates_list_newest_first_per_person_and_only_live_ones_are_live(store: Store) -> None:
    tenant = await _world(store)
    await _signed(store, tenant, mandate_id="mnd_old")
    await _signed(store, tenant, mandate_id="mnd_new", created_at=NOW + timedelta(seconds=1))
    await _signed(store, tenant, mandate_id="mnd_ended", expires_at=NOW + timedelta(seconds=30))
    await _signed(store, tenant, mandate_id="mnd_spent", used=3)
    async with store.unit_of_work(tenant) as uow:
        await uow.mandates.add(_mandate(tenant, "mnd_unsigned"))
        await uow.mandates.add(_mandate(tenant, "mnd_bobs", user_id="bob"))
    later = NOW + timedelta(minutes=1)
    async with store.unit_of_work(tenant) as uow:
        listed = [m.mandate_id for m in await uow.mandates.list_for("ana")]
        assert listed[0] == "mnd_new" and set(listed) == {
            "mnd_old",
            "mnd_new",
            "mnd_ended",
            "mnd_spent",
            "mnd_unsigned",
        }
        live = {m.mandate_id for m in await uow.mandates.live_for("ana", later)}
        assert live == {"mnd_old", "mnd_new"}
        assert [m.mandate_id for m in await uow.mandates.list_for("bob")] == ["mnd_bobs"]


async def test_a_mandate_moves_only_from_the_status_it_was_in(store: Store) -> None:
    tenant = await _world(store)
    await _signed(store, tenant)
    async with store.unit_of_work(tenant) as uow:
        assert not await uow.mandates.set_status(
            "mnd_1", MandateStatus.AWAITING_SIGNATURE, MandateStatus.DENIED, NOW, "device:p"
        )
        assert await uow.mandates.set_status(
            "mnd_1", MandateStatus.ACTIVE, MandateStatus.REVOKED, NOW, "user:ana"
        )
    async with store.unit_of_work(tenant) as uow:
        found = await uow.mandates.get("mnd_1")
        assert found is not None and found.status is MandateStatus.REVOKED
        assert found.decided_by == "user:ana" and found.decided_at == NOW
        assert await uow.mandates.take("mnd_1", NOW) is None  # a revoked mandate has no use left


async def test_taking_a_use_counts_in_all_and_per_utc_day_and_stops_at_each_bound(store: Store) -> None:
    tenant = await _world(store)
    await _signed(store, tenant)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.mandates.take("mnd_1", NOW) == 1
        assert await uow.mandates.take("mnd_1", NOW + timedelta(hours=1)) == 2
        assert await uow.mandates.take("mnd_1", NOW + timedelta(hours=2)) is None  # 2 a day
    tomorrow = NOW + timedelta(days=1)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.mandates.take("mnd_1", tomorrow) == 3
        assert await uow.mandates.take("mnd_1", tomorrow) is None  # 3 in all
        found = await uow.mandates.get("mnd_1")
        assert found is not None
        assert (found.used, found.used_on(tomorrow), found.used_on(NOW)) == (3, 1, 0)
    await _signed(store, tenant, mandate_id="mnd_2", per_day=None, expires_at=NOW + timedelta(hours=1))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.mandates.take("mnd_2", NOW + timedelta(hours=1)) is None  # its window ended
        assert await uow.mandates.take("mnd_absent", NOW) is None


async def test_calls_racing_for_a_mandates_last_uses_never_spend_one_twice(store: Store) -> None:
    tenant = await _world(store)
    await _signed(store, tenant, max_calls=5, per_day=None)

    async def take() -> int | None:
        async with store.unit_of_work(tenant) as uow:
            return await uow.mandates.take("mnd_1", NOW)

    taken = await asyncio.gather(*(take() for _ in range(12)))
    assert sorted(t for t in taken if t is not None) == [1, 2, 3, 4, 5]
    assert taken.count(None) == 7


async def test_the_signed_mandates_whose_window_closed_are_found_oldest_first_in_batches(
    store: Store,
) -> None:
    tenant = await _world(store)
    for i, minutes in enumerate((30, 10, 20)):
        await _signed(store, tenant, mandate_id=f"mnd_{i}", expires_at=NOW + timedelta(minutes=minutes))
    await _signed(store, tenant, mandate_id="mnd_later", expires_at=NOW + timedelta(hours=2))
    async with store.unit_of_work(tenant) as uow:
        await uow.mandates.add(_mandate(tenant, "mnd_unsigned", expires_at=NOW))
    at = NOW + timedelta(hours=1)
    async with store.unit_of_work(tenant) as uow:
        assert [m.mandate_id for m in await uow.mandates.ended(at, 2)] == ["mnd_1", "mnd_2"]
        assert [m.mandate_id for m in await uow.mandates.ended(at, 10)] == ["mnd_1", "mnd_2", "mnd_0"]
        assert await uow.mandates.set_status("mnd_1", MandateStatus.ACTIVE, MandateStatus.EXPIRED, at, "sys")
        assert [m.mandate_id for m in await uow.mandates.ended(at, 10)] == ["mnd_2", "mnd_0"]
    async with store.unit_of_work(tenant_name()) as uow:
        assert await uow.mandates.ended(at, 10) == []
