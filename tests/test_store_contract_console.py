"""The Store contract for the console's repositories (sign-ins, sessions) and the call history, on the
memory store, SQLite and PostgreSQL: the same answers, and a sign-in spent once under a race."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tapgate.domain.accounts import Tenant, User
from tapgate.domain.console import ConsoleSession, SignIn, SignInKind, SignInStatus
from tapgate.domain.devices import Device, DeviceStatus
from tapgate.domain.errors import Conflict
from tapgate.domain.invocations import Invocation, Status
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


def _sign_in(tenant: str, sign_in_id: str = "a" * 16, status: SignInStatus = SignInStatus.WAITING) -> SignIn:
    return SignIn(
        tenant_id=tenant,
        sign_in_id=sign_in_id,
        kind=SignInKind.PHONE,
        secret_hash="0" * 64,
        status=status,
        created_at=NOW,
        expires_at=NOW + timedelta(minutes=10),
        browser="Firefox",
    )


async def test_a_sign_in_round_trips_and_moves_only_from_the_status_it_was_in(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.sign_ins.add(_sign_in(tenant))
    async with store.unit_of_work(tenant) as uow:
        found = await uow.sign_ins.get("a" * 16)
        assert found == _sign_in(tenant)
        asked = found.asked("ana", "apr_1")
        assert await uow.sign_ins.save(asked, SignInStatus.WAITING)
        assert not await uow.sign_ins.save(asked, SignInStatus.WAITING)  # it is asked now
    async with store.unit_of_work(tenant) as uow:
        assert await uow.sign_ins.get("a" * 16) == asked
        assert await uow.sign_ins.get("b" * 16) is None
    async with store.unit_of_work(tenant_name()) as uow:
        assert await uow.sign_ins.get("a" * 16) is None  # another tenant's


async def test_a_sign_in_is_added_once(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.sign_ins.add(_sign_in(tenant))
    try:
        async with store.unit_of_work(tenant) as uow:
            await uow.sign_ins.add(_sign_in(tenant))
    except Conflict:
        pass
    else:
        raise AssertionError("a second sign-in of the same id was stored")


async def test_two_browsers_spending_one_approved_sign_in_at_once_leave_one_session(store: Store) -> None:
    tenant = await _world(store)
    approved = replace(_sign_in(tenant, status=SignInStatus.APPROVED), user_id="ana")
    async with store.unit_of_work(tenant) as uow:
        await uow.sign_ins.add(approved)

    async def spend() -> bool:
        async with store.unit_of_work(tenant) as uow:
            return await uow.sign_ins.save(approved.used(), SignInStatus.APPROVED)

    outcomes = await asyncio.gather(*(spend() for _ in range(6)))
    assert sorted(outcomes) == [False] * 5 + [True]


def _session(tenant: str, session_id: str, user: str = "ana", at: float = 0) -> ConsoleSession:
    return ConsoleSession(
        tenant_id=tenant,
        session_id=session_id,
        user_id=user,
        secret_hash="1" * 64,
        via=SignInKind.LINK,
        created_at=NOW + timedelta(seconds=at),
        expires_at=NOW + timedelta(hours=12),
        browser="Safari",
    )


async def test_console_sessions_list_newest_first_per_person_and_revoke_once(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.console_sessions.add(_session(tenant, "1" * 16, at=0))
        await uow.console_sessions.add(_session(tenant, "2" * 16, at=10))
        await uow.console_sessions.add(_session(tenant, "3" * 16, user="bob"))
    async with store.unit_of_work(tenant) as uow:
        assert [s.session_id for s in await uow.console_sessions.list_for("ana")] == ["2" * 16, "1" * 16]
        assert await uow.console_sessions.revoke("1" * 16, NOW)
        assert not await uow.console_sessions.revoke("1" * 16, NOW)
        assert not await uow.console_sessions.revoke("9" * 16, NOW)
    async with store.unit_of_work(tenant) as uow:
        revoked = await uow.console_sessions.get("1" * 16)
        assert revoked is not None and revoked.revoked_at == NOW and not revoked.live_at(NOW)
        assert await uow.console_sessions.get("2" * 16) == _session(tenant, "2" * 16, at=10)


async def test_the_call_history_is_the_persons_newest_first_by_agent_and_status(store: Store) -> None:
    tenant = await _world(store)
    device = Device(
        tenant, "ana", "d" * 16, "lamp", "Lamp", "lamp", "ed25519", "AAAA", DeviceStatus.ACTIVE, NOW
    )
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.add(device)
        for n, (agent, status) in enumerate(
            [("a1", Status.DONE), ("a2", Status.PENDING), ("a1", Status.PENDING)]
        ):
            await uow.invocations.add(
                Invocation(
                    tenant_id=tenant,
                    invocation_id=f"call-{n}",
                    user_id="ana",
                    agent_id=agent,
                    device_uid="d" * 16,
                    device_id="lamp",
                    tool="device__lamp__set_light",
                    capability="set_light",
                    arguments={},
                    arguments_sha256="0" * 64,
                    status=status,
                    created_at=NOW + timedelta(seconds=n),
                    expires_at=NOW + timedelta(minutes=5),
                    origin="owner",
                )
            )
    async with store.unit_of_work(tenant) as uow:
        assert [i.invocation_id for i in await uow.invocations.history("ana", 10)] == [
            "call-2",
            "call-1",
            "call-0",
        ]
        assert [i.invocation_id for i in await uow.invocations.history("ana", 1)] == ["call-2"]
        assert [i.invocation_id for i in await uow.invocations.history("ana", 10, "a1")] == [
            "call-2",
            "call-0",
        ]
        done = await uow.invocations.history("ana", 10, None, "done")
        assert [i.invocation_id for i in done] == ["call-0"]
        assert await uow.invocations.history("bob", 10) == []


async def test_expired_sign_ins_are_deleted_in_batches_and_only_they(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        for n in range(5):
            old = _sign_in(tenant, f"{n:016x}")
            await uow.sign_ins.add(replace(old, expires_at=NOW + timedelta(minutes=n)))
        fresh = replace(_sign_in(tenant, "f" * 16), address="203.0.113.9", approver_uid="9" * 16)
        await uow.sign_ins.add(replace(fresh, approver_id="ana-phone"))
    async with store.unit_of_work(tenant_name()) as uow:
        assert await uow.sign_ins.delete_ended(NOW + timedelta(hours=1), 100) == 0  # another tenant's
    later = NOW + timedelta(minutes=3, seconds=30)  # the first four have expired
    async with store.unit_of_work(tenant) as uow:
        assert await uow.sign_ins.delete_ended(later, 3) == 3
        assert await uow.sign_ins.delete_ended(later, 3) == 1
        assert await uow.sign_ins.delete_ended(later, 3) == 0
    async with store.unit_of_work(tenant) as uow:
        assert await uow.sign_ins.get(f"{3:016x}") is None
        assert await uow.sign_ins.get(f"{4:016x}") is not None
        kept = await uow.sign_ins.get("f" * 16)
        assert kept is not None and kept.address == "203.0.113.9" and kept.approver_id == "ana-phone"


async def test_a_decided_sign_in_keeps_the_device_that_signed_it(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.sign_ins.add(_sign_in(tenant, status=SignInStatus.ASKED))
        signed = replace(
            _sign_in(tenant, status=SignInStatus.APPROVED), approver_uid="9" * 16, approver_id="ana-phone"
        )
        assert await uow.sign_ins.save(signed, SignInStatus.ASKED)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.sign_ins.get("a" * 16) == signed


async def test_live_sessions_are_listed_per_tenant_and_person_and_end_with_their_signer(store: Store) -> None:
    tenant = await _world(store)
    signer = "9" * 16
    async with store.unit_of_work(tenant) as uow:
        await uow.console_sessions.add(
            replace(_session(tenant, "1" * 16), approver_uid=signer, approver_id="p")
        )
        await uow.console_sessions.add(replace(_session(tenant, "2" * 16, at=5), approver_uid=signer))
        await uow.console_sessions.add(_session(tenant, "3" * 16, user="bob", at=10))
        short = replace(_session(tenant, "4" * 16, at=15), expires_at=NOW + timedelta(minutes=1))
        await uow.console_sessions.add(short)
    async with store.unit_of_work(tenant) as uow:
        assert [s.session_id for s in await uow.console_sessions.live(NOW)] == [
            "1" * 16,
            "2" * 16,
            "3" * 16,
            "4" * 16,
        ]
        later = NOW + timedelta(minutes=2)  # the short one has expired
        assert [s.session_id for s in await uow.console_sessions.live(later, "ana")] == ["1" * 16, "2" * 16]
        assert sorted(await uow.console_sessions.revoke_signed_by(signer, NOW)) == ["1" * 16, "2" * 16]
        assert await uow.console_sessions.revoke_signed_by(signer, NOW) == []
    async with store.unit_of_work(tenant_name()) as uow:
        assert await uow.console_sessions.live(NOW) == []  # another tenant's
    async with store.unit_of_work(tenant) as uow:
        assert [s.session_id for s in await uow.console_sessions.live(NOW)] == ["3" * 16, "4" * 16]
        ended = await uow.console_sessions.get("1" * 16)
        assert ended is not None and ended.revoked_at == NOW and ended.approver_id == "p"


async def test_a_sessions_last_use_only_moves_forward(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.console_sessions.add(_session(tenant, "1" * 16))
    async with store.unit_of_work(tenant) as uow:
        await uow.console_sessions.touch("1" * 16, NOW + timedelta(minutes=5))
        await uow.console_sessions.touch("1" * 16, NOW + timedelta(minutes=2))
        await uow.console_sessions.touch("9" * 16, NOW)  # none: nothing happens
    async with store.unit_of_work(tenant) as uow:
        found = await uow.console_sessions.get("1" * 16)
        assert found is not None and found.last_used_at == NOW + timedelta(minutes=5)
