"""The push outbox's part of the Store contract, on every adapter (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tapgate.domain.accounts import Tenant, User
from tapgate.domain.devices import Device, DeviceStatus, PushTarget
from tapgate.domain.push import OutboxItem, OutboxStatus
from tapgate.ports import Store
from tests.conftest import tenant_name

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)


def _at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


async def _tenant_with_devices(store: Store, *users: str) -> tuple[str, dict[str, str]]:
    """A tenant where each user has one device with a push target; the device uid by user."""
    tenant = tenant_name()
    uids = {}
    async with store.unit_of_work(tenant) as uow:
        await uow.tenants.add(Tenant(tenant, tenant, NOW))
        for n, user in enumerate(users):
            await uow.users.add(User(tenant, user, user, NOW))
            uid = f"{n:016x}"
            await uow.devices.add(
                Device(
                    tenant_id=tenant,
                    user_id=user,
                    device_uid=uid,
                    device_id=f"{user}-phone",
                    name="Phone",
                    kind="phone",
                    alg="ed25519",
                    public_key="AAAA",
                    status=DeviceStatus.ACTIVE,
                    created_at=NOW,
                    push=PushTarget("fcm", f"token-{user}"),
                )
            )
            uids[user] = uid
    return tenant, uids


def _row(
    tenant: str, uid: str, user: str, delivery: str, not_before: float = 0, **fields: object
) -> OutboxItem:
    return OutboxItem(
        tenant_id=tenant,
        delivery_id=delivery,
        device_uid=uid,
        user_id=user,
        event=str(fields.pop("event", "invocation.pending")),
        subject_id=str(fields.pop("subject_id", f"inv-{delivery}")),
        not_before=_at(not_before),
        created_at=_at(float(str(fields.pop("created", 0)))),
        **fields,  # type: ignore[arg-type]
    )


async def _add(store: Store, tenant: str, *rows: OutboxItem) -> None:
    async with store.unit_of_work(tenant) as uow:
        for row in rows:
            await uow.outbox.add(row)


async def _claim(store: Store, tenant: str, now: float, limit: int = 10) -> list[str]:
    async with store.unit_of_work(tenant) as uow:
        return [i.delivery_id for i in await uow.outbox.claim(_at(now), _at(now) + LEASE, limit)]


async def test_a_claim_takes_the_due_rows_oldest_first_and_none_that_wait(store: Store) -> None:
    tenant, uids = await _tenant_with_devices(store, "ana")
    ana = uids["ana"]
    await _add(
        store,
        tenant,
        _row(tenant, ana, "ana", "d-late", not_before=5),
        _row(tenant, ana, "ana", "d-2", not_before=1),
        _row(tenant, ana, "ana", "d-1", not_before=0),
        _row(tenant, ana, "ana", "d-done", status=OutboxStatus.SENT),
    )
    assert await _claim(store, tenant, now=1, limit=1) == ["d-1"]
    assert await _claim(store, tenant, now=1) == ["d-2"]
    assert await _claim(store, tenant, now=5) == ["d-late"]
    assert await _claim(store, tenant, now=5) == []
    async with store.unit_of_work(tenant) as uow:
        claimed = await uow.outbox.get("d-1")
    assert claimed is not None and claimed.claimed_until == _at(1) + LEASE


async def test_a_claimed_row_is_claimed_again_only_once_its_claim_lapses(store: Store) -> None:
    tenant, uids = await _tenant_with_devices(store, "ana")
    await _add(store, tenant, _row(tenant, uids["ana"], "ana", "d-1"))
    assert await _claim(store, tenant, now=0) == ["d-1"]
    assert await _claim(store, tenant, now=59) == []
    async with store.unit_of_work(tenant) as uow:
        assert await uow.outbox.next_due() == _at(60)  # when the claim lapses
    assert await _claim(store, tenant, now=60) == ["d-1"]


async def test_a_claim_never_reaches_into_another_tenant(store: Store) -> None:
    mine, _ = await _tenant_with_devices(store, "ana")
    theirs, their_uids = await _tenant_with_devices(store, "ana")
    await _add(store, theirs, _row(theirs, their_uids["ana"], "ana", "d-theirs"))
    assert await _claim(store, mine, now=0) == []
    async with store.unit_of_work(mine) as uow:
        assert await uow.outbox.next_due() is None
        assert await uow.outbox.get("d-theirs") is None
    assert await _claim(store, theirs, now=0) == ["d-theirs"]


async def test_a_saved_row_reads_back_and_keeps_a_notices_words_only_while_queued(store: Store) -> None:
    tenant, uids = await _tenant_with_devices(store, "ana")
    notice = _row(
        tenant,
        uids["ana"],
        "ana",
        "d-notice",
        event="goal.done",
        subject_id="ntc-1",
        data={"goal_id": "g-1", "urgent": True, "steps": 3},
        title="Flights found",
        body="Three options",
    )
    await _add(store, tenant, notice)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.outbox.for_subject("ntc-1") == [notice]
        sent = replace(notice, status=OutboxStatus.SENT, attempts=1, pushed_at=_at(1), finished_at=_at(2))
        await uow.outbox.save(sent)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.outbox.get("d-notice") == replace(sent, data={}, title=None, body=None)


async def test_pushes_count_per_user_in_the_window_and_only_those_that_went_out(store: Store) -> None:
    tenant, uids = await _tenant_with_devices(store, "ana", "bob")
    ana, bob = uids["ana"], uids["bob"]
    await _add(
        store,
        tenant,
        _row(tenant, ana, "ana", "d-old", status=OutboxStatus.SENT, pushed_at=_at(-700)),
        _row(tenant, ana, "ana", "d-sent", status=OutboxStatus.SENT, pushed_at=_at(-10)),
        _row(tenant, ana, "ana", "d-flying", pushed_at=_at(-1), claimed_until=_at(59)),
        _row(tenant, ana, "ana", "d-failed", status=OutboxStatus.FAILED, pushed_at=_at(-5)),
        _row(tenant, ana, "ana", "d-capped", status=OutboxStatus.CAPPED),
        _row(tenant, ana, "ana", "d-waiting"),
        _row(tenant, bob, "bob", "d-bob", status=OutboxStatus.SENT, pushed_at=_at(-3)),
    )
    async with store.unit_of_work(tenant) as uow:
        assert await uow.outbox.pushed_since("ana", _at(-600)) == 2
        assert await uow.outbox.pushed_since("bob", _at(-600)) == 1
        assert await uow.outbox.pushed_since("ana", _at(0)) == 0
        assert await uow.outbox.last_pushed(ana) == _at(-1)
        assert await uow.outbox.last_pushed(bob) == _at(-3)
        assert await uow.outbox.next_due() == _at(0)  # d-waiting (d-flying's claim lapses later)


async def test_a_device_push_target_can_be_replaced_and_removed(store: Store) -> None:
    tenant, uids = await _tenant_with_devices(store, "ana")
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.set_push(uids["ana"], PushTarget("webpush", "{}"))
        device = await uow.devices.by_uid(uids["ana"])
        assert device is not None and device.push == PushTarget("webpush", "{}")
        await uow.devices.set_push(uids["ana"], None)
    async with store.unit_of_work(tenant) as uow:
        device = await uow.devices.by_uid(uids["ana"])
    assert device is not None and device.push is None


async def test_a_devices_notices_for_its_link_are_the_held_and_unpushed_ones_until_linked(
    store: Store,
) -> None:
    tenant, uids = await _tenant_with_devices(store, "ana", "bob")
    ana, bob = uids["ana"], uids["bob"]
    notice = {"event": "goal.done", "data": {"goal_id": "g-1"}, "title": "Done", "body": "All of it"}
    await _add(
        store,
        tenant,
        _row(tenant, ana, "ana", "held", subject_id="ntc-1", status=OutboxStatus.HELD, created=1, **notice),
        _row(tenant, ana, "ana", "queued", subject_id="ntc-2", created=2, **notice),
        _row(tenant, ana, "ana", "pushing", subject_id="ntc-3", created=3, pushed_at=_at(3), **notice),
        _row(tenant, ana, "ana", "old", subject_id="ntc-0", status=OutboxStatus.HELD, created=-100, **notice),
        _row(tenant, ana, "ana", "call", created=4),  # an invocation's push is no notice
        _row(tenant, bob, "bob", "bobs", subject_id="ntc-1", status=OutboxStatus.HELD, created=1, **notice),
    )
    async with store.unit_of_work(tenant) as uow:
        waiting = await uow.outbox.notices_for(ana, _at(0))
    assert [i.delivery_id for i in waiting] == ["held", "queued"]
    assert waiting[0].data == {"goal_id": "g-1"} and (waiting[0].title, waiting[0].body) == (
        "Done",
        "All of it",
    )
    assert waiting[0].status is OutboxStatus.HELD

    async with store.unit_of_work(tenant) as uow:
        assert await uow.outbox.linked(["held", "queued", "pushing", "bobs-not-here"], _at(5)) == 3
        assert await uow.outbox.linked([], _at(5)) == 0
    assert await _claim(store, tenant, 10) == ["call"]  # a linked row is never pushed
    async with store.unit_of_work(tenant) as uow:
        assert await uow.outbox.notices_for(ana, _at(-1000)) == [await uow.outbox.get("old")]
        linked = await uow.outbox.get("held")
        assert linked is not None and linked.status is OutboxStatus.LINKED and linked.finished_at == _at(5)
        assert (linked.data, linked.title, linked.body) == ({}, None, None)
        assert [i.delivery_id for i in await uow.outbox.notices_for(bob, _at(0))] == ["bobs"]


async def test_held_notices_past_their_life_are_let_go(store: Store) -> None:
    tenant, uids = await _tenant_with_devices(store, "ana")
    ana = uids["ana"]
    notice = {"event": "run.failed", "data": {"run_id": "r-1"}}
    await _add(
        store,
        tenant,
        _row(tenant, ana, "ana", "old", subject_id="ntc-1", status=OutboxStatus.HELD, created=0, **notice),
        _row(tenant, ana, "ana", "young", subject_id="ntc-2", status=OutboxStatus.HELD, created=20, **notice),
        _row(tenant, ana, "ana", "queued", subject_id="ntc-3", created=0, **notice),
    )
    async with store.unit_of_work(tenant) as uow:
        assert await uow.outbox.expire_held(_at(10)) == 1
    async with store.unit_of_work(tenant) as uow:
        old = await uow.outbox.get("old")
        assert old is not None and old.status is OutboxStatus.SKIPPED and old.data == {}
        assert [i.delivery_id for i in await uow.outbox.notices_for(ana, _at(-100))] == ["queued", "young"]
