"""The Store contract, port by port: every method of every repository in ``ports.py`` behaves the same on
the memory store, SQLite and PostgreSQL, races included (two answers to one call, two decisions on one
card, two workers claiming one push). The first repositories are in test_store_contract.py and the push
outbox in test_outbox_store.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.approvals import SignBlock
from tapgate.domain.audit import GENESIS, AuditRecord
from tapgate.domain.console import ALL_AGENTS
from tapgate.domain.devices import (
    BUILTINS,
    PHONE_ACTIONS,
    SMS_SEND,
    Declared,
    Device,
    DeviceStatus,
    Presence,
    PushTarget,
)
from tapgate.domain.errors import Conflict, DuplicateInvocation
from tapgate.domain.inbox import Approval, ApprovalStatus
from tapgate.domain.ingest import Receipt, Triage
from tapgate.domain.invocations import Invocation, Status
from tapgate.domain.pairing import Pairing, PairingStatus
from tapgate.domain.principals import Scope, TokenKind
from tapgate.domain.push import OutboxItem
from tapgate.domain.sessions import Session, SessionKind
from tapgate.ports import Store
from tests.conftest import tenant_name

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def _device(tenant: str, uid: str, device_id: str = "phone", user: str = "ana", at: float = 0) -> Device:
    return Device(
        tenant_id=tenant,
        user_id=user,
        device_uid=uid,
        device_id=device_id,
        name="Phone",
        kind="phone",
        alg="ed25519",
        public_key="AAAA",
        status=DeviceStatus.ACTIVE,
        created_at=_at(at),
    )


async def _world(store: Store, *users: str) -> str:
    tenant = tenant_name()
    async with store.unit_of_work(tenant) as uow:
        await uow.tenants.add(Tenant(tenant, tenant, NOW))
        for user in users or ("ana",):
            await uow.users.add(User(tenant, user, user.title(), NOW))
    return tenant


async def _with_device(store: Store, uid: str = "d" * 16) -> str:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.add(_device(tenant, uid))
    return tenant


def _invocation(
    tenant: str,
    invocation_id: str,
    uid: str = "d" * 16,
    at: float = 0,
    status: Status = Status.PENDING,
    capability: str = "light",
    expires: float = 60,
) -> Invocation:
    return Invocation(
        tenant_id=tenant,
        invocation_id=invocation_id,
        user_id="ana",
        agent_id="agent",
        device_uid=uid,
        device_id="phone",
        tool=f"device__phone__{capability}",
        capability=capability,
        arguments={"on": True},
        arguments_sha256="a" * 64,
        status=status,
        created_at=_at(at),
        expires_at=_at(expires),
    )


# Credentials


async def test_revoking_a_device_revokes_every_token_of_that_device_and_no_other(store: Store) -> None:
    tenant = await _world(store)

    def token(cid: str, uid: str | None) -> Credential:
        kind = TokenKind.DEVICE if uid else TokenKind.AGENT
        return Credential(
            tenant, cid, kind, "f" * 64, frozenset({Scope.DEVICE_READ}), NOW, user_id="ana", device_uid=uid
        )

    async with store.unit_of_work(tenant) as uow:
        await uow.devices.add(_device(tenant, "a" * 16, "one"))
        await uow.devices.add(_device(tenant, "b" * 16, "two"))
        for cid, uid in (("c1", "a" * 16), ("c2", "a" * 16), ("c3", "b" * 16), ("c4", None)):
            await uow.credentials.add(token(cid.ljust(16, "0"), uid))
    async with store.unit_of_work(tenant) as uow:
        await uow.credentials.revoke_device("a" * 16, _at(5))
    async with store.unit_of_work(tenant) as uow:
        revoked = {c: (await uow.credentials.get(c.ljust(16, "0"))) for c in ("c1", "c2", "c3", "c4")}
    assert {c: x.revoked_at if x else "missing" for c, x in revoked.items()} == {
        "c1": _at(5),
        "c2": _at(5),
        "c3": None,
        "c4": None,
    }
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.credentials.add(token("c1".ljust(16, "0"), None))


# Devices


async def test_a_device_round_trips_with_its_capabilities_and_is_unique_per_user(store: Store) -> None:
    tenant = await _world(store, "ana", "bob")
    declared = (  # in the order declared (not by name), each with its grant
        Declared(BUILTINS[SMS_SEND], granted=True),
        Declared(BUILTINS[PHONE_ACTIONS], granted=False),
    )
    device = replace(_device(tenant, "a" * 16), capabilities=declared)
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.add(device)
        await uow.devices.add(_device(tenant, "b" * 16, user="bob"))  # the same id, another user
    async with store.unit_of_work(tenant) as uow:
        assert await uow.devices.get("ana", "phone") == device
        assert await uow.devices.by_uid("a" * 16) == device
        assert await uow.devices.get("ana", "tablet") is None
        assert await uow.devices.by_uid("c" * 16) is None
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.devices.add(_device(tenant, "c" * 16))


async def test_live_devices_list_oldest_first_and_a_revoked_one_frees_its_id(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.add(_device(tenant, "b" * 16, "second", at=2))
        await uow.devices.add(_device(tenant, "a" * 16, "first", at=1))
        await uow.devices.add(replace(_device(tenant, "c" * 16, "third", at=3), status=DeviceStatus.PENDING))
    async with store.unit_of_work(tenant) as uow:
        assert [d.device_id for d in await uow.devices.list("ana")] == ["first", "second", "third"]
        assert await uow.devices.count_live("ana") == 3
        await uow.devices.set_status("a" * 16, DeviceStatus.REVOKED, _at(9))
        await uow.devices.set_status("c" * 16, DeviceStatus.ACTIVE, _at(9))
    async with store.unit_of_work(tenant) as uow:
        assert [d.device_id for d in await uow.devices.list("ana")] == ["second", "third"]
        assert await uow.devices.count_live("ana") == 2
        assert await uow.devices.get("ana", "first") is None
        revoked = await uow.devices.by_uid("a" * 16)
        assert revoked is not None and (revoked.status, revoked.revoked_at) == (DeviceStatus.REVOKED, _at(9))
        third = await uow.devices.by_uid("c" * 16)
        assert third is not None and (third.status, third.revoked_at) == (DeviceStatus.ACTIVE, None)
        await uow.devices.add(_device(tenant, "d" * 16, "first", at=4))  # its id is free again
    async with store.unit_of_work(tenant) as uow:
        again = await uow.devices.get("ana", "first")
        assert again is not None and again.device_uid == "d" * 16


async def test_a_devices_capabilities_presence_link_and_push_are_replaced_in_place(store: Store) -> None:
    tenant = await _with_device(store)
    uid = "d" * 16
    granted = (Declared(BUILTINS[SMS_SEND], granted=True),)
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.set_capabilities(uid, granted)
        await uow.devices.touch(uid, _at(3))
        await uow.devices.set_link(uid, _at(30))
        await uow.devices.set_push(uid, PushTarget("webpush", "endpoint"))
    async with store.unit_of_work(tenant) as uow:
        device = await uow.devices.by_uid(uid)
        assert device is not None
        assert (device.capabilities, device.last_seen_at, device.link_until, device.push) == (
            granted,
            _at(3),
            _at(30),
            PushTarget("webpush", "endpoint"),
        )
        await uow.devices.set_capabilities(uid, ())
        await uow.devices.set_link(uid, None)
        await uow.devices.set_push(uid, None)
    async with store.unit_of_work(tenant) as uow:
        device = await uow.devices.by_uid(uid)
        assert device is not None
        assert (device.capabilities, device.link_until, device.push) == ((), None, None)


async def test_a_devices_presence_is_its_status_link_and_push_route_as_stored(store: Store) -> None:
    tenant = await _with_device(store)
    uid = "d" * 16
    async with store.unit_of_work(tenant) as uow:
        assert await uow.devices.presence("0" * 16) is None
        assert await uow.devices.presence(uid) == Presence(DeviceStatus.ACTIVE, None, False)
        await uow.devices.set_link(uid, _at(30))
        assert await uow.devices.presence(uid) == Presence(DeviceStatus.ACTIVE, _at(30), False)
        await uow.devices.set_link(uid, None)
        await uow.devices.set_push(uid, PushTarget("webpush", "endpoint"))
        await uow.devices.set_status(uid, DeviceStatus.REVOKED, _at(40))
    async with store.unit_of_work(tenant) as uow:
        presence = await uow.devices.presence(uid)
        device = await uow.devices.by_uid(uid)
        assert presence == Presence(DeviceStatus.REVOKED, None, True)
        assert device is not None and device.presence() == presence
        assert not presence.online(_at(1))  # revoked: reachable by push, but not online
    other = await _world(store)
    async with store.unit_of_work(other) as uow:
        assert await uow.devices.presence(uid) is None  # another tenant's


async def test_links_are_held_in_one_call_for_the_devices_named_and_no_others(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        for uid, name in (("e" * 16, "second"), ("f" * 16, "third")):
            await uow.devices.add(_device(tenant, uid, name, at=2))
        await uow.devices.set_link("f" * 16, _at(5))
        await uow.devices.hold_links(["d" * 16, "e" * 16, "0" * 16], _at(60))  # an unknown one is skipped
        await uow.devices.hold_links([], _at(90))
    other = await _with_device(store)  # the same device uid in another tenant is not touched
    async with store.unit_of_work(tenant) as uow:
        held = {uid: (await uow.devices.by_uid(uid)) for uid in ("d" * 16, "e" * 16, "f" * 16)}
        assert {uid: d.link_until for uid, d in held.items() if d is not None} == {
            "d" * 16: _at(60),
            "e" * 16: _at(60),
            "f" * 16: _at(5),
        }
    async with store.unit_of_work(other) as uow:
        await uow.devices.hold_links(["d" * 16], _at(70))
    async with store.unit_of_work(tenant) as uow:
        mine = await uow.devices.by_uid("d" * 16)
        assert mine is not None and mine.link_until == _at(60)


async def test_devices_of_one_tenant_are_invisible_to_another(store: Store) -> None:
    a = await _with_device(store)
    b = await _world(store)
    async with store.unit_of_work(b) as uow:
        assert await uow.devices.by_uid("d" * 16) is None
        assert await uow.devices.get("ana", "phone") is None
        assert await uow.devices.count_live("ana") == 0
        await uow.devices.touch("d" * 16, _at(7))  # names another tenant's device: changes nothing
    async with store.unit_of_work(a) as uow:
        device = await uow.devices.by_uid("d" * 16)
        assert device is not None and device.last_seen_at is None


# Pairings


async def test_a_pairing_round_trips_and_is_saved_through_its_states(store: Store) -> None:
    tenant = await _world(store)
    pairing = Pairing(tenant, "p" * 16, "ana", "h" * 64, PairingStatus.OPEN, NOW, _at(300), code="ABCD-EFGH")
    async with store.unit_of_work(tenant) as uow:
        await uow.pairings.add(pairing)
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.pairings.add(pairing)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.pairings.get("p" * 16) == pairing
        assert await uow.pairings.get("q" * 16) is None
        await uow.devices.add(_device(tenant, "d" * 16))
        claimed = replace(
            pairing,
            status=PairingStatus.AWAITING_CONSENT,
            code=None,
            device_uid="d" * 16,
            comparison_code="123456",
            attempts=1,
        )
        await uow.pairings.save(claimed)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.pairings.get("p" * 16) == claimed


# Sessions


async def test_a_session_is_inserted_then_updated_and_keeps_its_first_creation_time(store: Store) -> None:
    tenant = await _with_device(store)
    session = Session(tenant, "ana", "s-1", "agent", SessionKind.CHAT, True, NOW, NOW)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.sessions.get("ana", "s-1") is None
        await uow.sessions.save(session)
    later = replace(
        session,
        created_at=_at(50),
        updated_at=_at(60),
        latest_device_uid="d" * 16,
        latest_capabilities=("sms_send",),
        phone_device_uid="d" * 16,
    )
    async with store.unit_of_work(tenant) as uow:
        assert await uow.sessions.get("ana", "s-1") == session
        await uow.sessions.save(later)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.sessions.get("ana", "s-1") == replace(later, created_at=NOW)
        first = await uow.sessions.add_message(later, "d" * 16, ["sms_send"], _at(61))
        second = await uow.sessions.add_message(later, None, [], _at(62))
    assert (first, second) == (1, 2)


# Invocations


async def test_an_invocation_round_trips_and_a_second_of_the_same_id_is_refused(store: Store) -> None:
    tenant = await _with_device(store)
    invocation = replace(_invocation(tenant, "inv-1"), session_id="s-1", run_id="r-1", origin="owner")
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(invocation)
    with pytest.raises(DuplicateInvocation):
        async with store.unit_of_work(tenant) as uow:
            await uow.invocations.add(invocation)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.get("ana", "inv-1") == invocation
        assert await uow.invocations.get("ana", "inv-2") is None


async def test_an_invocation_id_is_its_users_own(store: Store) -> None:
    """Two people of one tenant may choose the same id: each reads, answers and marks only their own."""
    tenant = await _world(store, "ana", "bob")
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.add(_device(tenant, "d" * 16))
        await uow.devices.add(_device(tenant, "e" * 16, user="bob"))
    anas = _invocation(tenant, "inv-1")
    bobs = replace(_invocation(tenant, "inv-1", uid="e" * 16), user_id="bob", arguments={"on": False})
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(anas)
        await uow.invocations.add(bobs)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.get("ana", "inv-1") == anas
        assert await uow.invocations.get("bob", "inv-1") == bobs
        assert await uow.invocations.get("cy", "inv-1") is None
        await uow.invocations.mark_delivered("ana", "d" * 16, ["inv-1"], _at(1))
        await uow.invocations.mark_delivered("bob", "d" * 16, ["inv-1"], _at(1))  # not bob's device's
        assert await uow.invocations.resolve(replace(anas, status=Status.DONE, resolved_at=_at(2))) is True
        assert await uow.invocations.add_late_report("ana", "inv-1", "done", None, _at(3)) is True
    async with store.unit_of_work(tenant) as uow:
        stored = await uow.invocations.get("bob", "inv-1")
    assert stored == bobs  # untouched by everything done to ana's


async def test_pending_calls_of_a_device_come_oldest_first_and_open_ones_include_the_waiting(
    store: Store,
) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-c", at=3))
        await uow.invocations.add(_invocation(tenant, "inv-a", at=1))
        await uow.invocations.add(_invocation(tenant, "inv-w", at=2, status=Status.AWAITING_APPROVAL))
        await uow.invocations.add(_invocation(tenant, "inv-d", at=0, status=Status.DONE))
        await uow.invocations.add(_invocation(tenant, "inv-b", at=4))
    async with store.unit_of_work(tenant) as uow:
        assert [i.invocation_id for i in await uow.invocations.pending_for("d" * 16, 10)] == [
            "inv-a",
            "inv-c",
            "inv-b",
        ]
        assert [i.invocation_id for i in await uow.invocations.pending_for("d" * 16, 2)] == ["inv-a", "inv-c"]
        open_ids = sorted(i.invocation_id for i in await uow.invocations.open_for("d" * 16))
        assert open_ids == ["inv-a", "inv-b", "inv-c", "inv-w"]  # in no promised order
        assert await uow.invocations.pending_for("e" * 16, 10) == []


async def test_a_call_comes_with_its_devices_presence_as_stored(store: Store) -> None:
    """``get_with_presence``: the agent's view of a call, its device's presence read with it."""
    tenant = await _with_device(store)
    uid = "d" * 16
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-a"))
        await uow.devices.set_link(uid, _at(30))
    async with store.unit_of_work(tenant) as uow:
        found = await uow.invocations.get_with_presence("ana", "inv-a")
        assert found == (_invocation(tenant, "inv-a"), Presence(DeviceStatus.ACTIVE, _at(30), False))
        assert found[1] == await uow.devices.presence(uid)
        assert await uow.invocations.get_with_presence("ana", "inv-z") == (None, None)
        assert await uow.invocations.get_with_presence("bob", "inv-a") == (None, None)  # its user's own id
        await uow.devices.set_link(uid, None)
        await uow.devices.set_push(uid, PushTarget("webpush", "endpoint"))
        await uow.devices.set_status(uid, DeviceStatus.REVOKED, _at(40))
    async with store.reading(tenant) as uow:
        found = await uow.invocations.get_with_presence("ana", "inv-a")
        assert found == (_invocation(tenant, "inv-a"), Presence(DeviceStatus.REVOKED, None, True))


async def test_a_reading_unit_of_work_reads_what_was_committed_as_a_unit_of_work_does(store: Store) -> None:
    """``Store.reading``: the device's pending calls, a call and a device's presence, as committed (what
    a long-poll's first look, a live link's fetch and the agent's read ask)."""
    tenant = await _with_device(store)
    uid = "d" * 16
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-b", at=2))
        await uow.invocations.add(_invocation(tenant, "inv-a", at=1))
    async with store.reading(tenant) as uow:
        assert [i.invocation_id for i in await uow.invocations.pending_for(uid, 10)] == ["inv-a", "inv-b"]
        assert await uow.invocations.get("ana", "inv-a") == _invocation(tenant, "inv-a", at=1)
        assert await uow.invocations.get("ana", "inv-z") is None
        assert await uow.invocations.get("bob", "inv-a") is None  # an id is its user's own
        assert await uow.devices.presence(uid) == Presence(DeviceStatus.ACTIVE, None, False)
        assert await uow.devices.presence("0" * 16) is None
    async with store.reading(tenant_name()) as uow:  # a tenant with nothing yet reads nothing
        assert await uow.invocations.pending_for(uid, 10) == []


async def test_delivery_notes_the_latest_hand_over_and_ignores_unknown_ids(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-1"))
        await uow.invocations.add(_invocation(tenant, "inv-2"))
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.mark_delivered("ana", "d" * 16, ["inv-1"], _at(1))
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.mark_delivered("ana", "d" * 16, ["inv-1", "inv-2", "inv-x"], _at(2))
        await uow.invocations.mark_delivered("bob", "d" * 16, ["inv-1", "inv-2"], _at(3))  # another user's
        await uow.invocations.mark_delivered("ana", "e" * 16, ["inv-1"], _at(3))  # another device's
        await uow.invocations.mark_delivered("bob", "d" * 16, ["inv-2"], _at(3))
    async with store.unit_of_work(tenant) as uow:
        one, two = await uow.invocations.get("ana", "inv-1"), await uow.invocations.get("ana", "inv-2")
    assert one is not None and two is not None
    assert (one.delivered_at, two.delivered_at) == (_at(2), _at(2))  # redelivery reads the latest
    assert one.status is Status.PENDING


async def test_only_an_open_call_resolves_and_its_answer_reads_back(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-1"))
    answer = replace(
        _invocation(tenant, "inv-1"), status=Status.DONE, resolved_at=_at(2), message="on", reason=None
    )
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.resolve(answer) is True
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.resolve(replace(answer, status=Status.FAILED)) is False
        assert await uow.invocations.resolve(replace(answer, invocation_id="inv-x")) is False
        stored = await uow.invocations.get("ana", "inv-1")
    assert stored is not None
    assert (stored.status, stored.resolved_at, stored.message) == (Status.DONE, _at(2), "on")
    assert stored.arguments == {"on": True}


async def test_a_devices_answer_takes_only_its_own_pending_call_before_the_deadline(store: Store) -> None:
    tenant = await _with_device(store)
    other = "e" * 16
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.add(_device(tenant, other, device_id="lamp"))
        await uow.invocations.add(_invocation(tenant, "inv-1", expires=10))
        await uow.invocations.add(_invocation(tenant, "inv-wait", status=Status.AWAITING_APPROVAL))
        await uow.invocations.add(_invocation(tenant, "inv-done", status=Status.DONE))
        await uow.invocations.add(_invocation(tenant, "inv-due", expires=5))
    uid = "d" * 16
    async with store.unit_of_work(tenant) as uow:
        answer = uow.invocations.answer
        assert await answer("ana", "inv-1", other, Status.DONE, None, _at(2)) is None  # another device's
        assert await answer("bob", "inv-1", uid, Status.DONE, None, _at(2)) is None  # another user's
        assert await answer("ana", "inv-x", uid, Status.DONE, None, _at(2)) is None
        assert await answer("ana", "inv-wait", uid, Status.DONE, None, _at(2)) is None
        assert await answer("ana", "inv-done", uid, Status.FAILED, None, _at(2)) is None
        assert await answer("ana", "inv-due", uid, Status.DONE, None, _at(5)) is None  # due at its deadline
        answered = await answer("ana", "inv-1", uid, Status.DECLINED, "not now", _at(2))
    assert answered is not None
    assert (answered.status, answered.message, answered.resolved_at) == (Status.DECLINED, "not now", _at(2))
    assert (answered.arguments, answered.expires_at, answered.device_uid) == ({"on": True}, _at(10), uid)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.answer("ana", "inv-1", uid, Status.DONE, None, _at(3)) is None
        assert await uow.invocations.get("ana", "inv-1") == answered
        untouched = [await uow.invocations.get("ana", i) for i in ("inv-wait", "inv-done", "inv-due")]
    assert [i.status for i in untouched if i is not None] == [
        Status.AWAITING_APPROVAL,
        Status.DONE,
        Status.PENDING,
    ]


async def test_an_answer_with_presence_takes_what_answer_takes_and_reads_its_own_devices_presence(
    store: Store,
) -> None:
    """``answer_with_presence``: the answer and the answering device's presence, not another device's
    (its tenant's first, or one of the same uid in another tenant)."""
    tenant = await _with_device(store)  # "d" * 16: no link, a push route
    uid = "f" * 16
    elsewhere = await _with_device(store, uid)  # the same uid in another tenant: active, no link
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.set_push("d" * 16, PushTarget("webpush", "endpoint"))
        await uow.devices.add(_device(tenant, uid, device_id="lamp", at=1))
        await uow.devices.set_link(uid, _at(30))
        await uow.invocations.add(_invocation(tenant, "inv-1", uid=uid, expires=10))
        await uow.invocations.add(_invocation(tenant, "inv-2", uid=uid, expires=10))
        await uow.invocations.add(_invocation(tenant, "inv-d", expires=10))
    async with store.unit_of_work(elsewhere) as uow:
        await uow.devices.set_status(uid, DeviceStatus.PENDING, _at(1))
    async with store.unit_of_work(tenant) as uow:
        answer = uow.invocations.answer_with_presence
        assert await answer("ana", "inv-1", "d" * 16, Status.DONE, None, _at(2)) is None  # another device's
        assert await answer("ana", "inv-1", uid, Status.DONE, None, _at(10)) is None  # due at its deadline
        assert await answer("ana", "inv-x", uid, Status.DONE, None, _at(2)) is None
        taken = await answer("ana", "inv-1", uid, Status.DECLINED, "not now", _at(2))
        assert taken is not None
        assert taken == (await uow.invocations.get("ana", "inv-1"), await uow.devices.presence(uid))
        assert taken[1] == Presence(DeviceStatus.ACTIVE, _at(30), False)
        assert (taken[0].status, taken[0].message, taken[0].resolved_at) == (
            Status.DECLINED,
            "not now",
            _at(2),
        )
        assert await answer("ana", "inv-1", uid, Status.DONE, None, _at(3)) is None  # answered already
        on_push = await answer("ana", "inv-d", "d" * 16, Status.DONE, None, _at(3))
        assert on_push is not None and on_push[1] == Presence(DeviceStatus.ACTIVE, None, True)
        await uow.devices.set_link(uid, None)
        await uow.devices.set_status(uid, DeviceStatus.REVOKED, _at(4))
        revoked = await answer("ana", "inv-2", uid, Status.DONE, None, _at(5))
    assert revoked is not None and revoked[1] == Presence(DeviceStatus.REVOKED, None, False)


async def test_two_device_answers_racing_for_one_call_leave_exactly_one(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-1"))
    gate = asyncio.Event()

    async def answer(status: Status) -> Invocation | None:
        async with store.unit_of_work(tenant) as uow:
            await uow.invocations.get("ana", "inv-1")  # both read the open row first where the engine allows
            await gate.wait()
            return await uow.invocations.answer("ana", "inv-1", "d" * 16, status, None, _at(1))

    tasks = [asyncio.create_task(answer(Status.DONE)), asyncio.create_task(answer(Status.FAILED))]
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    [winner] = [o for o in outcomes if o is not None]
    assert outcomes.count(None) == 1
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.get("ana", "inv-1") == winner


async def test_two_answers_racing_for_one_call_leave_exactly_one_winner(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-1"))
    gate = asyncio.Event()

    async def answer(status: Status) -> bool:
        async with store.unit_of_work(tenant) as uow:
            await uow.invocations.get("ana", "inv-1")  # both read the open row first where the engine allows
            await gate.wait()
            return await uow.invocations.resolve(
                replace(_invocation(tenant, "inv-1"), status=status, resolved_at=_at(1))
            )

    tasks = [asyncio.create_task(answer(Status.DONE)), asyncio.create_task(answer(Status.EXPIRED))]
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert sorted(outcomes) == [False, True]
    async with store.unit_of_work(tenant) as uow:
        stored = await uow.invocations.get("ana", "inv-1")
    winner = Status.DONE if outcomes[0] else Status.EXPIRED
    assert stored is not None and stored.status is winner


async def test_an_approved_call_proceeds_only_while_it_waits_for_approval(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-w", status=Status.AWAITING_APPROVAL))
        await uow.invocations.add(_invocation(tenant, "inv-p"))
    going = replace(_invocation(tenant, "inv-w"), status=Status.PENDING, expires_at=_at(600))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.proceed(going) is True
        assert await uow.invocations.proceed(replace(going, invocation_id="inv-p")) is False
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.proceed(going) is False
        stored = await uow.invocations.get("ana", "inv-w")
    assert stored is not None and (stored.status, stored.expires_at) == (Status.PENDING, _at(600))


async def test_confirming_calls_count_only_pending_sms_and_phone_actions_of_the_user(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-1", capability="sms_send"))
        await uow.invocations.add(_invocation(tenant, "inv-2", capability="phone_actions"))
        await uow.invocations.add(_invocation(tenant, "inv-3", capability="light"))
        await uow.invocations.add(_invocation(tenant, "inv-4", capability="sms_send", status=Status.DONE))
        await uow.invocations.add(
            _invocation(tenant, "inv-5", capability="sms_send", status=Status.AWAITING_APPROVAL)
        )
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.count_confirming("ana") == 2
        assert await uow.invocations.count_confirming("bob") == 0


async def test_a_late_report_is_kept_once(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-1", status=Status.EXPIRED))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.add_late_report("ana", "inv-1", "done", "too late", _at(70)) is True
        assert await uow.invocations.add_late_report("ana", "inv-x", "done", None, _at(70)) is False
    async with store.unit_of_work(tenant) as uow:
        assert await uow.invocations.add_late_report("ana", "inv-1", "failed", None, _at(71)) is False
        stored = await uow.invocations.get("ana", "inv-1")
    assert stored is not None
    assert (stored.late_status, stored.late_message, stored.late_at) == ("done", "too late", _at(70))
    assert stored.status is Status.EXPIRED


async def test_due_calls_are_the_open_ones_past_their_deadline_soonest_first(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-late", expires=20))
        await uow.invocations.add(_invocation(tenant, "inv-early", expires=10, at=1))
        await uow.invocations.add(
            _invocation(tenant, "inv-wait", expires=15, status=Status.AWAITING_APPROVAL)
        )
        await uow.invocations.add(_invocation(tenant, "inv-done", expires=5, status=Status.DONE))
        await uow.invocations.add(_invocation(tenant, "inv-future", expires=99))
    async with store.unit_of_work(tenant) as uow:
        assert [i.invocation_id for i in await uow.invocations.due(_at(20), 10)] == [
            "inv-early",
            "inv-wait",
            "inv-late",
        ]
        assert [i.invocation_id for i in await uow.invocations.due(_at(20), 1)] == ["inv-early"]
        assert await uow.invocations.due(_at(9), 10) == []


async def test_a_sweep_and_a_devices_answer_racing_leave_one_outcome(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-1", expires=10))

    async def sweep() -> bool:
        async with store.unit_of_work(tenant) as uow:
            won = False
            for due in await uow.invocations.due(_at(11), 10):
                won = (
                    await uow.invocations.resolve(replace(due, status=Status.EXPIRED, resolved_at=_at(11)))
                    or won
                )
            return won

    async def answer() -> bool:
        async with store.unit_of_work(tenant) as uow:
            done = replace(_invocation(tenant, "inv-1"), status=Status.DONE, resolved_at=_at(11))
            return await uow.invocations.resolve(done)

    outcomes = await asyncio.wait_for(asyncio.gather(sweep(), answer()), 30)
    assert sorted(outcomes) == [False, True]
    async with store.unit_of_work(tenant) as uow:
        stored = await uow.invocations.get("ana", "inv-1")
        assert await uow.invocations.due(_at(11), 10) == []
    assert stored is not None and stored.status is (Status.EXPIRED if outcomes[0] else Status.DONE)


# Outbox: two workers claiming at once


async def test_two_workers_claiming_at_once_never_take_the_same_push(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        for n in range(6):
            await uow.outbox.add(
                OutboxItem(tenant, f"del-{n}", "d" * 16, "ana", "invocation.pending", f"inv-{n}", NOW, NOW)
            )

    async def claim() -> list[str]:
        async with store.unit_of_work(tenant) as uow:
            return [i.delivery_id for i in await uow.outbox.claim(_at(1), _at(61), 4)]

    first, second = await asyncio.wait_for(asyncio.gather(claim(), claim()), 30)
    assert not set(first) & set(second)
    assert sorted(first + second) == [f"del-{n}" for n in range(6)]


# Approvals


def _approval(tenant: str, approval_id: str, at: float = 0) -> Approval:
    return Approval(
        tenant_id=tenant,
        approval_id=approval_id,
        user_id="ana",
        agent_id="agent",
        invocation_id=f"inv-{approval_id}",
        kind="door",
        subject="phone",
        prompt="Unlock the door?",
        preview={"door": "front"},
        sign=SignBlock("tapgate-approval-v1", "c" * 32, 2_000_000_000, "a" * 64),
        binding_code="ACDE",
        status=ApprovalStatus.PENDING,
        created_at=_at(at),
        expires_at=_at(at + 300),
    )


async def test_approvals_round_trip_and_list_the_undecided_oldest_first(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        for approval_id, at in (("apr-b", 2), ("apr-a", 1), ("apr-c", 3)):
            await uow.invocations.add(_invocation(tenant, f"inv-{approval_id}", at=at))
            await uow.approvals.add(_approval(tenant, approval_id, at))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.approvals.get("apr-a") == _approval(tenant, "apr-a", 1)
        assert await uow.approvals.get("apr-x") is None
        approved = replace(
            _approval(tenant, "apr-b", 2), status=ApprovalStatus.APPROVED, decided_at=_at(5), decided_by="d"
        )
        assert await uow.approvals.decide(approved) is True
    async with store.unit_of_work(tenant) as uow:
        assert [a.approval_id for a in await uow.approvals.pending_for("ana")] == ["apr-a", "apr-c"]
        assert await uow.approvals.count_pending("ana") == 2
        assert await uow.approvals.count_pending("bob") == 0
        assert await uow.approvals.get("apr-b") == approved
        assert await uow.approvals.decide(replace(approved, status=ApprovalStatus.DENIED)) is False


async def test_two_decisions_racing_for_one_card_leave_exactly_one(store: Store) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-apr-1"))
        await uow.approvals.add(_approval(tenant, "apr-1"))

    async def decide(status: ApprovalStatus) -> bool:
        async with store.unit_of_work(tenant) as uow:
            decided = replace(_approval(tenant, "apr-1"), status=status, decided_at=_at(1))
            return await uow.approvals.decide(decided)

    outcomes = await asyncio.wait_for(
        asyncio.gather(decide(ApprovalStatus.APPROVED), decide(ApprovalStatus.DENIED)), 30
    )
    assert sorted(outcomes) == [False, True]
    async with store.unit_of_work(tenant) as uow:
        stored = await uow.approvals.get("apr-1")
    expected = ApprovalStatus.APPROVED if outcomes[0] else ApprovalStatus.DENIED
    assert stored is not None and stored.status is expected


# Pauses


async def test_a_pause_is_per_user_and_agent_and_a_later_one_replaces_it(store: Store) -> None:
    tenant = await _world(store, "ana", "bob")
    async with store.unit_of_work(tenant) as uow:
        assert await uow.pauses.paused_until("ana", "agent") is None
        await uow.pauses.pause("ana", "agent", _at(60))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.pauses.paused_until("ana", "agent") == _at(60)
        assert await uow.pauses.paused_until("ana", "other") is None
        assert await uow.pauses.paused_until("bob", "agent") is None
        await uow.pauses.pause("ana", "agent", _at(120))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.pauses.paused_until("ana", "agent") == _at(120)


async def test_a_device_comes_with_the_persons_pause_of_every_agent_and_of_the_calling_agent(
    store: Store,
) -> None:
    """``get_with_pause``: the check chain's first look. The pause of every agent (ALL_AGENTS) of this
    person, whether or not the device exists, and the pause of the agent named; another agent's pause,
    or another person's, is neither."""
    tenant = await _world(store, "ana", "bob")
    declared = (Declared(BUILTINS[SMS_SEND], granted=True), Declared(BUILTINS[PHONE_ACTIONS], granted=False))
    device = replace(_device(tenant, "a" * 16), capabilities=declared)
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.add(device)
        assert await uow.devices.get_with_pause("ana", "phone", "agent") == (device, None, None)
        await uow.pauses.pause("ana", "agent", _at(60))  # one agent: not the person's switch
        await uow.pauses.pause("bob", ALL_AGENTS, _at(60))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.devices.get_with_pause("ana", "phone", "agent") == (device, None, _at(60))
        assert await uow.devices.get_with_pause("ana", "phone", "other") == (device, None, None)
        await uow.pauses.pause("ana", ALL_AGENTS, _at(90))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.devices.get_with_pause("ana", "phone", "other") == (device, _at(90), None)
        assert await uow.devices.get_with_pause("ana", "tablet", "agent") == (None, _at(90), None)
        assert await uow.devices.get_with_pause("bob", "phone", "agent") == (None, _at(60), None)
        await uow.devices.set_status("a" * 16, DeviceStatus.REVOKED, _at(1))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.devices.get_with_pause("ana", "phone", "agent") == (None, _at(90), None)


# Ingests


async def test_a_receipt_is_stored_once_per_device_channel_and_digest(store: Store) -> None:
    tenant = await _with_device(store)
    uid = "d" * 16
    receipt = Receipt("rcp-1", "triage-1")
    async with store.unit_of_work(tenant) as uow:
        assert await uow.ingests.receipt(uid, "sms", "h" * 64) is None
        await uow.ingests.add_receipt(uid, "sms", "h" * 64, receipt, _at(-5), NOW)
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.ingests.add_receipt(uid, "sms", "h" * 64, Receipt("rcp-2", "t"), NOW, NOW)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.ingests.receipt(uid, "sms", "h" * 64) == receipt
        assert await uow.ingests.receipt(uid, "sms", "g" * 64) is None
        await uow.ingests.add_receipt(uid, "sms", "g" * 64, Receipt("rcp-3", "triage-1"), NOW, NOW)


async def test_the_daily_cap_counts_each_message_and_stops_at_the_cap(store: Store) -> None:
    tenant = await _with_device(store)
    uid = "d" * 16
    async with store.unit_of_work(tenant) as uow:
        taken = [await uow.ingests.take(uid, "2026-03-01", 3) for _ in range(4)]
        assert await uow.ingests.take(uid, "2026-03-02", 3) is True  # a new day counts afresh
    assert taken == [True, True, True, False]
    async with store.unit_of_work(tenant) as uow:
        assert await uow.ingests.take(uid, "2026-03-01", 3) is False
        assert await uow.ingests.take(uid, "2026-03-01", 4) is True


async def test_a_triage_session_is_pinned_once_and_moved_only_on_purpose(store: Store) -> None:
    tenant = await _with_device(store)
    uid = "d" * 16
    first, second = Triage("triage-1", NOW), Triage("triage-2", _at(9))
    async with store.unit_of_work(tenant) as uow:
        for session_id in ("triage-1", "triage-2"):
            await uow.sessions.save(
                Session(tenant, "ana", session_id, "agent", SessionKind.CHAT, False, NOW, NOW)
            )
        assert await uow.ingests.triage(uid, "sms") is None
        await uow.ingests.set_triage(uid, "sms", "ana", first, replace=False)
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.ingests.set_triage(uid, "sms", "ana", second, replace=False)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.ingests.triage(uid, "sms") == first
        await uow.ingests.set_triage(uid, "sms", "ana", second, replace=True)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.ingests.triage(uid, "sms") == second


# Events


async def test_events_number_in_commit_order_and_read_per_user_after_a_cursor(store: Store) -> None:
    tenant = await _world(store, "ana", "bob")
    async with store.unit_of_work(tenant) as uow:
        await uow.events.append("ana", "invocation.done", {"id": "inv-1"}, NOW)
        await uow.events.append("bob", "invocation.done", {"id": "inv-2"}, _at(1))
    async with store.unit_of_work(tenant) as uow:
        await uow.events.append("ana", "approval.pending", {"n": 3, "ok": True}, _at(2))
    one, two, three = 1, 2, 3
    async with store.unit_of_work(tenant) as uow:
        ana = list(await uow.events.read("ana", 0, 10))
        assert [(e.seq, e.type, dict(e.data)) for e in ana] == [
            (one, "invocation.done", {"id": "inv-1"}),
            (three, "approval.pending", {"n": 3, "ok": True}),
        ]
        assert ana[0].created_at == NOW and ana[0].user_id == "ana"
        assert [e.seq for e in await uow.events.read("ana", one, 10)] == [three]
        assert [e.seq for e in await uow.events.read("ana", 0, 1)] == [one]
        assert [e.seq for e in await uow.events.read("bob", 0, 10)] == [two]


async def test_events_racing_from_two_units_of_work_get_distinct_increasing_numbers(store: Store) -> None:
    tenant = await _world(store)

    async def append(n: int) -> None:
        async with store.unit_of_work(tenant) as uow:
            await uow.events.append("ana", "thing", {"n": n}, NOW)

    await asyncio.wait_for(asyncio.gather(*(append(n) for n in range(8))), 30)
    async with store.unit_of_work(tenant) as uow:
        read = list(await uow.events.read("ana", 0, 20))
    assert [e.seq for e in read] == list(range(1, 9))
    assert sorted(e.data["n"] for e in read) == list(range(8))


# Journal


async def test_the_journal_head_is_genesis_for_a_new_tenant_and_follows_each_entry(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.journal.head() == (0, GENESIS)
        await uow.journal.append(AuditRecord("thing.done", "test"), NOW)
    async with store.unit_of_work(tenant) as uow:
        (entry,) = await uow.journal.read(0, 10)
        assert await uow.journal.head() == (1, entry.hash)
    async with store.unit_of_work(tenant_name()) as uow:
        assert await uow.journal.head() is None
