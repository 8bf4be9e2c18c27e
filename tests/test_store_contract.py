"""The Store contract: every adapter (memory, SQLite, PostgreSQL) passes the same suite."""

from __future__ import annotations

import asyncio
import re
import typing
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tapgate import ports
from tapgate.adapters.clock import FrozenClock
from tapgate.domain.accounts import Credential, Tenant, User
from tapgate.domain.audit import AuditRecord, verify_chain
from tapgate.domain.errors import Conflict
from tapgate.domain.principals import Scope, TokenKind
from tapgate.ports import Store
from tests.conftest import tenant_name

NOW = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)


async def _tenant(store: Store) -> str:
    name = tenant_name()
    async with store.unit_of_work(name) as uow:
        await uow.tenants.add(Tenant(name, name, NOW))
    return name


async def test_a_tenant_reads_back_as_written(store: Store) -> None:
    name = await _tenant(store)
    async with store.unit_of_work(name) as uow:
        assert await uow.tenants.get() == Tenant(name, name, NOW)
    assert name in await store.tenant_ids()


async def test_a_tenant_remembers_where_it_was_served_and_when_it_moved(store: Store) -> None:
    a, b = await _tenant(store), await _tenant(store)
    later = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    async with store.unit_of_work(a) as uow:
        await uow.tenants.set_served("http://127.0.0.1:8080", None)
    async with store.unit_of_work(a) as uow:
        assert await uow.tenants.get() == Tenant(a, a, NOW, "http://127.0.0.1:8080", None)
        await uow.tenants.set_served("https://tapgate.example", later)
    async with store.unit_of_work(a) as uow:
        assert await uow.tenants.get() == Tenant(a, a, NOW, "https://tapgate.example", later)
        await uow.tenants.set_served("https://tapgate.example", None)  # served again: the move stays
    async with store.unit_of_work(a) as uow:
        assert await uow.tenants.get() == Tenant(a, a, NOW, "https://tapgate.example", later)
    async with store.unit_of_work(b) as uow:
        assert await uow.tenants.get() == Tenant(b, b, NOW)


async def test_a_device_the_browser_app_paired_reads_back_as_such(store: Store) -> None:
    from tapgate.domain.devices import BROWSER_APP, Device, DeviceStatus

    a = await _tenant(store)
    phone = Device(
        a, "ana", "00aa11bb22cc33ee", "phone", "Phone", "phone", "ed25519", "k", DeviceStatus.ACTIVE, NOW
    )
    async with store.unit_of_work(a) as uow:
        await uow.users.add(User(a, "ana", "Ana", NOW))
        await uow.devices.add(replace(phone, app=BROWSER_APP))
        await uow.devices.add(replace(phone, device_uid="00aa11bb22cc33ff", device_id="lamp"))
    async with store.unit_of_work(a) as uow:
        assert [(d.device_id, d.app) for d in await uow.devices.list("ana")] == [
            ("phone", BROWSER_APP),
            ("lamp", None),
        ]
        assert (await uow.devices.by_uid("00aa11bb22cc33ee")).app == BROWSER_APP  # type: ignore[union-attr]


async def test_a_second_tenant_of_the_same_name_is_a_conflict(store: Store) -> None:
    name = await _tenant(store)
    with pytest.raises(Conflict):
        async with store.unit_of_work(name) as uow:
            await uow.tenants.add(Tenant(name, "again", NOW))


async def test_users_are_unique_per_tenant_and_invisible_to_others(store: Store) -> None:
    a, b = await _tenant(store), await _tenant(store)
    async with store.unit_of_work(a) as uow:
        await uow.users.add(User(a, "ana", "Ana", NOW))
    async with store.unit_of_work(b) as uow:
        assert await uow.users.get("ana") is None
        await uow.users.add(User(b, "ana", "Another Ana", NOW))
    with pytest.raises(Conflict):
        async with store.unit_of_work(a) as uow:
            await uow.users.add(User(a, "ana", "Ana twice", NOW))
    async with store.unit_of_work(a) as uow:
        assert await uow.users.get("ana") == User(a, "ana", "Ana", NOW)


async def test_users_list_by_id_within_their_tenant_only(store: Store) -> None:
    a, b = await _tenant(store), await _tenant(store)
    async with store.unit_of_work(a) as uow:
        await uow.users.add(User(a, "zoe", "Zoe", NOW))
        await uow.users.add(User(a, "ana", "Ana", NOW))
    async with store.unit_of_work(b) as uow:
        await uow.users.add(User(b, "bob", "Bob", NOW))
    async with store.unit_of_work(a) as uow:
        assert list(await uow.users.list()) == [User(a, "ana", "Ana", NOW), User(a, "zoe", "Zoe", NOW)]


async def test_a_credential_round_trips_with_its_scopes_and_bindings(store: Store) -> None:
    a = await _tenant(store)
    credential = Credential(
        a,
        "0123456789abcdef",
        TokenKind.USER,
        "f" * 64,
        frozenset({Scope.APPROVE, Scope.DEVICE_READ}),
        NOW,
        user_id="ana",
        require_device_signature=True,
    )
    async with store.unit_of_work(a) as uow:
        await uow.users.add(User(a, "ana", "Ana", NOW))
        await uow.credentials.add(credential)
    async with store.unit_of_work(a) as uow:
        assert await uow.credentials.get("0123456789abcdef") == credential
        assert await uow.credentials.get("fedcba9876543210") is None
    made_in_console = replace(
        credential,
        credential_id="00000000000000aa",
        kind=TokenKind.AGENT,
        agent_id="planner",
        require_device_signature=None,
        console_session_id="5" * 16,
        agent_name="Ana's planner",
    )
    async with store.unit_of_work(a) as uow:
        await uow.credentials.add(made_in_console)
    async with store.unit_of_work(a) as uow:
        assert await uow.credentials.get("00000000000000aa") == made_in_console


async def test_a_failed_unit_of_work_leaves_nothing(store: Store) -> None:
    a = await _tenant(store)

    async def fail_midway() -> None:
        async with store.unit_of_work(a) as uow:
            await uow.users.add(User(a, "ana", "Ana", NOW))
            await uow.journal.append(AuditRecord("user.created", "test", subject="ana"), NOW)
            raise RuntimeError("stop before commit")

    with pytest.raises(RuntimeError):
        await fail_midway()
    async with store.unit_of_work(a) as uow:
        assert await uow.users.get("ana") is None
        assert list(await uow.journal.read(0, 10)) == []


async def test_a_cancelled_unit_of_work_leaves_nothing_and_the_next_one_runs(store: Store) -> None:
    """A request cancelled inside its unit of work (a client gone, a shutdown) rolls it back and lets
    the next one begin: on SQLite the store's one connection is given back."""
    a = await _tenant(store)
    inside = asyncio.Event()

    async def held() -> None:
        async with store.unit_of_work(a) as uow:
            await uow.users.add(User(a, "ana", "Ana", NOW))
            inside.set()
            await asyncio.Event().wait()  # until cancelled

    task = asyncio.create_task(held())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(30):  # a store that kept its connection would wait here for ever
        async with store.unit_of_work(a) as uow:
            assert await uow.users.get("ana") is None
            await uow.users.add(User(a, "bob", "Bob", NOW))
    async with store.unit_of_work(a) as uow:
        assert await uow.users.get("bob") == User(a, "bob", "Bob", NOW)


async def test_the_journal_chains_entries_in_order_and_pages(store: Store) -> None:
    a, b = await _tenant(store), await _tenant(store)
    clock = FrozenClock(NOW)
    for i in range(5):
        async with store.unit_of_work(a) as uow:
            await uow.journal.append(
                AuditRecord("thing.done", "test", subject=f"s{i}", data={"n": i}), clock.now()
            )
        clock.advance(1)
    async with store.unit_of_work(b) as uow:
        await uow.journal.append(AuditRecord("other.done", "test"), clock.now())
    async with store.unit_of_work(a) as uow:
        entries = list(await uow.journal.read(0, 10))
        page = list(await uow.journal.read(2, 2))
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
    assert [e.data["n"] for e in entries] == [0, 1, 2, 3, 4]
    assert [e.seq for e in page] == [3, 4]
    assert verify_chain(a, entries) == 5
    assert entries[0].at == NOW
    async with store.unit_of_work(b) as uow:
        assert [e.action for e in await uow.journal.read(0, 10)] == ["other.done"]


async def test_credentials_are_listed_revoked_once_and_touched_only_forward(store: Store) -> None:
    a = await _tenant(store)
    later = NOW.replace(minute=45)
    made = [
        Credential(a, "000000000000000a", TokenKind.OPERATOR, "a" * 64, frozenset(), NOW),
        Credential(a, "000000000000000b", TokenKind.AGENT, "b" * 64, frozenset({Scope.TOOLS}), NOW,
                   user_id="ana", agent_id="bot", expires_at=later),
        Credential(a, "000000000000000c", TokenKind.USER, "c" * 64, frozenset(), NOW, user_id="ana"),
    ]  # fmt: skip
    async with store.unit_of_work(a) as uow:
        await uow.users.add(User(a, "ana", "Ana", NOW))
        for credential in made:
            await uow.credentials.add(credential)
    async with store.unit_of_work(a) as uow:
        assert [c.credential_id for c in await uow.credentials.list(user_id="ana")] == [
            "000000000000000b",
            "000000000000000c",
        ]
        assert await uow.credentials.list(kind=TokenKind.OPERATOR) == [made[0]]
        assert (await uow.credentials.get("000000000000000b")).expires_at == later  # type: ignore[union-attr]
        assert await uow.credentials.revoke("000000000000000c", later) is True
        assert await uow.credentials.revoke("000000000000000c", later) is False
        await uow.credentials.touch({"000000000000000b": later})
        await uow.credentials.touch({"000000000000000b": NOW})  # an older time never wins
    async with store.unit_of_work(a) as uow:
        live = [c.credential_id for c in await uow.credentials.list()]
        assert live == ["000000000000000a", "000000000000000b"]
        assert (await uow.credentials.get("000000000000000b")).last_used_at == later  # type: ignore[union-attr]
        assert (await uow.credentials.get("000000000000000c")).revoked_at == later  # type: ignore[union-attr]


async def test_a_revoked_device_id_is_remembered_but_no_longer_live(store: Store) -> None:
    from tapgate.domain.devices import Device, DeviceStatus

    a = await _tenant(store)
    lamp = Device(
        a,
        "ana",
        "00aa11bb22cc33dd",
        "desk-lamp",
        "Desk lamp",
        "lamp",
        "ed25519",
        "k",
        DeviceStatus.ACTIVE,
        NOW,
    )
    async with store.unit_of_work(a) as uow:
        await uow.users.add(User(a, "ana", "Ana", NOW))
        await uow.devices.add(lamp)
        assert await uow.devices.ever("ana", "desk-lamp")
        assert not await uow.devices.ever("ana", "hall-lamp")
        await uow.devices.set_status(lamp.device_uid, DeviceStatus.REVOKED, NOW)
    async with store.unit_of_work(a) as uow:
        assert await uow.devices.get("ana", "desk-lamp") is None
        assert await uow.devices.ever("ana", "desk-lamp")
        assert not await uow.devices.ever("bob", "desk-lamp")


async def test_a_unit_of_work_wakes_its_keys_waiters_once_it_commits_and_never_when_it_fails(
    store: Store,
) -> None:
    a = await _tenant(store)
    wake = store.wake  # type: ignore[attr-defined]  # this process's waiters, as the gateway's are

    async def fail_midway() -> None:
        async with store.unit_of_work(a) as uow:
            uow.notify("k")
            await uow.users.add(User(a, "bob", "Bob", NOW))
            raise RuntimeError("stop before commit")

    with wake.subscribe("k") as woken, wake.subscribe("other") as elsewhere:
        with pytest.raises(RuntimeError):
            await fail_midway()
        assert not woken.is_set()
        async with store.unit_of_work(a) as uow:
            uow.notify("k")
            await uow.users.add(User(a, "ana", "Ana", NOW))
            assert not woken.is_set()  # not before the commit
        await asyncio.wait_for(woken.wait(), 30)
        assert not elsewhere.is_set()
        async with store.unit_of_work(a) as uow:  # what woke it is there to read
            assert await uow.users.get("ana") is not None


async def test_a_unit_of_work_hands_what_it_wrote_to_the_waiters_that_take_it_once_it_commits(
    store: Store,
) -> None:
    a = await _tenant(store)
    wake = store.wake  # type: ignore[attr-defined]
    taken = asyncio.Event()

    async def fail_midway() -> None:
        async with store.unit_of_work(a) as uow:
            uow.hand("k", "lost")
            raise RuntimeError("stop before commit")

    with wake.subscribe("k", swept=False, also=taken) as link, wake.subscribe("k") as plain:
        with pytest.raises(RuntimeError):
            await fail_midway()
        assert not link.is_set()
        async with store.unit_of_work(a) as uow:
            await uow.users.add(User(a, "ana", "Ana", NOW))
            uow.hand("k", "one")
            uow.hand("k", "two")
            assert not link.is_set()
        await asyncio.wait_for(taken.wait(), 30)
        assert wake.handed(link) == ["one", "two"]
        assert plain.is_set() and wake.handed(plain) is None  # a waiter without ``also`` reads


async def test_a_store_answers_a_ping_while_open_and_closes(store: Store) -> None:
    await store.ping()
    await _tenant(store)
    await store.close()  # the fixture closes it again: closing twice is harmless


# The contract's reach


def test_every_method_of_the_store_and_its_repositories_has_a_contract_test() -> None:
    """The store, its units of work and each repository they hold (``ports.UnitOfWork``) are called,
    method by method, by the contract tests that run on all three stores: a new method comes with its
    test."""
    contract = "".join(
        path.read_text(encoding="utf-8")
        for path in Path(__file__).parent.glob("test_*.py")
        if path.name.startswith(("test_store_contract", "test_outbox_store", "test_passkey_store"))
    )

    def methods(port: type) -> list[str]:
        return [m for m in vars(port) if not m.startswith("_") and callable(getattr(port, m))]

    untested = [f"store.{m}" for m in methods(ports.Store) if not re.search(rf"\bstore\.{m}\(", contract)]
    untested += [f"uow.{m}" for m in methods(ports.UnitOfWork) if not re.search(rf"\buow\.{m}\(", contract)]
    for name, member in vars(ports.UnitOfWork).items():
        if not isinstance(member, property) or name == "tenant_id":
            continue
        repository = typing.get_type_hints(member.fget, vars(ports))["return"]
        untested += [
            f"{name}.{m}" for m in methods(repository) if not re.search(rf"\.{name}\.{m}\b", contract)
        ]
    assert untested == []
