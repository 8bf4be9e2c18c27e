"""Every repository method, called in one tenant with another tenant's ids, on SQLite, where the tenant
condition ``adapters/store/tenancy.py`` adds is the only isolation between tenants.

Tenant A is seeded through the services with a row in every table. Tenant B, which has nothing of its
own, then calls every method of every repository with A's ids (and A's objects, relabelled as B's): once
in the store that holds A, once in a store that never did. B's answers must be the same in both, and A's
rows must be as they were.
"""

from __future__ import annotations

import dataclasses
import inspect
import sqlite3
import typing
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from tapgate import ports
from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.migrate import migrate
from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.store.tables import TENANT_TABLES
from tapgate.adapters.wake.local import LocalWake
from tapgate.domain.accounts import Tenant
from tapgate.domain.audit import AuditRecord
from tapgate.domain.console import SignInStatus
from tapgate.domain.devices import BUILTINS, SMS_SEND, Declared, DeviceStatus
from tapgate.domain.errors import TapgateError
from tapgate.domain.inbox import ApprovalStatus
from tapgate.domain.ingest import Receipt, Triage
from tapgate.domain.invocations import Status
from tapgate.domain.mandates import MandateStatus
from tapgate.domain.principals import TokenKind
from tapgate.ports import Store
from tapgate.services import accounts, invoking
from tapgate.services.context import Context
from tapgate.services.invoking import Call
from tests.conftest import tenant_name
from tests.test_postgres_tenancy import _seed_devices

USER = "ann"


def _rows(path: Path, tenant: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``tenant`` in every table, read past the store."""
    with sqlite3.connect(path) as db:
        return {
            table: sorted(
                db.execute(f"SELECT * FROM {table} WHERE tenant_id = ?", (tenant,)).fetchall(), key=repr
            )
            for table in TENANT_TABLES
        }


async def _seed_a(store: Store, clock: FrozenClock, a: str) -> None:
    operator = await accounts.create_tenant(store, clock, a)
    caller = await accounts.authenticate(store, operator.token)
    await accounts.create_user(store, clock, caller, USER, None)
    agent_token = await accounts.create_token(store, clock, caller, USER, TokenKind.AGENT)
    await _seed_devices(store, clock, caller, USER, agent_token.token)
    # A call still pending and one still waiting for its approval: the rows a stray UPDATE would move.
    # (once the agent's pause is over: the person said one of its calls was not theirs)
    clock.advance(3600)
    agent = await accounts.authenticate(store, agent_token.token)
    ctx = Context(store, clock, LocalWake(), device_channel=True)
    await invoking.invoke(ctx, agent, Call("device__desk_lamp__set_light", {"on": False}))
    await invoking.invoke(ctx, agent, Call("device__desk_lamp__unlock_door", {"on": False}))


def _leave_pending(path: Path, a: str) -> None:
    """An entry and an event of A's waiting to be sealed, as a writer on PostgreSQL leaves them (on SQLite
    a writer always holds the head, so they are written here past the store)."""
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO audit_pending (tenant_id, at, action, actor, outcome, subject, reason, data)"
            " VALUES (?, '2026-01-01 00:00:00.000000', 'thing.done', 'test', 'ok', '', '', '{}')",
            (a,),
        )
        db.execute(
            "INSERT INTO events_pending (tenant_id, user_id, type, data, created_at)"
            " VALUES (?, ?, 'thing', '{}', '2026-01-01 00:00:00.000000')",
            (a, USER),
        )


def _first(
    rows: list[tuple[Any, ...]], column: int, *, where: Callable[[tuple[Any, ...]], bool] = bool
) -> Any:
    return next(row[column] for row in rows if where(row))


async def _a_and_its_ids(path: Path, store: Store, a: str, b: str) -> dict[str, Any]:
    """A's ids and objects, by the name of the parameter that takes them (objects relabelled as B's)."""
    rows = _rows(path, a)
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        row = {
            table: [dict(r) for r in db.execute(f"SELECT * FROM {table} WHERE tenant_id = ?", (a,))]
            for table in TENANT_TABLES
        }
    assert all(rows.values()), [table for table, found in rows.items() if not found]
    lamp = next(d for d in row["devices"] if d["device_id"] == "desk-lamp")
    pending = next(i for i in row["invocations"] if i["status"] == Status.PENDING.value)
    asked = next(p for p in row["approvals"] if p["status"] == ApprovalStatus.PENDING.value)
    agent = next(c for c in row["credentials"] if c["kind"] == TokenKind.AGENT.value)
    console = row["console_sessions"][0]
    async with store.unit_of_work(a) as uow:
        objects = {
            "tenant": await uow.tenants.get(),
            "user": await uow.users.get(USER),
            "credential": await uow.credentials.get(agent["credential_id"]),
            "device": await uow.devices.by_uid(lamp["device_uid"]),
            "pairing": await uow.pairings.get(row["pairings"][0]["pairing_id"]),
            "session": await uow.sessions.get(USER, row["sessions"][0]["session_id"]),
            "invocation": await uow.invocations.get(USER, pending["invocation_id"]),
            "item": await uow.outbox.get(row["push_outbox"][0]["delivery_id"]),
            "approval": await uow.approvals.get(asked["approval_id"]),
            "mandate": await uow.mandates.get(row["mandates"][0]["mandate_id"]),
            "passkey": await uow.passkeys.get(row["passkeys"][0]["credential_id"]),
            "sign_in": await uow.sign_ins.get(row["console_sign_ins"][0]["sign_in_id"]),
            "session_console": await uow.console_sessions.get(console["session_id"]),
        }
        keys = await uow.proofs.issuer_keys()
        signed = await uow.proofs.signature(row["approval_signatures"][0]["approval_id"])
    assert keys and signed is not None  # A's own, which B names as its own in its calls
    assert all(objects.values()), [name for name, found in objects.items() if found is None]
    relabelled = {name: dataclasses.replace(o, tenant_id=b) for name, o in objects.items()}
    receipt = row["ingest_receipts"][0]
    return {
        **relabelled,
        "user_id": USER,
        "device_id": lamp["device_id"],
        "device_uid": lamp["device_uid"],
        "device_uids": [d["device_uid"] for d in row["devices"]],
        "credential_id": agent["credential_id"],
        "pairing_id": row["pairings"][0]["pairing_id"],
        "session_id": row["sessions"][0]["session_id"],
        "invocation_id": pending["invocation_id"],
        "invocation_ids": [i["invocation_id"] for i in row["invocations"]],
        "delivery_id": row["push_outbox"][0]["delivery_id"],
        "delivery_ids": [o["delivery_id"] for o in row["push_outbox"]],
        "subject_id": row["push_outbox"][0]["subject_id"],
        "approval_id": asked["approval_id"],
        "mandate_id": row["mandates"][0]["mandate_id"],
        "sign_in_id": row["console_sign_ins"][0]["sign_in_id"],
        "approver_uid": console["approver_uid"],
        "agent_id": agent["agent_id"],
        "channel": receipt["channel"],
        "digest": receipt["digest"],
        "day": row["ingest_counters"][0]["day"],
        "type": row["events"][0]["type"],
        "kinds": sorted({p["kind"] for p in row["approvals"]}),
        "action": row["audit_entries"][0]["action"],
        "subject": row["audit_entries"][0]["subject"],
        "key": keys[0],
        "signed": signed,
    }


def _arguments(
    repository: str, method: str, signature: inspect.Signature, ids: dict[str, Any], clock: FrozenClock
) -> list[Any]:
    """The arguments of ``repository.method``: A's ids where it takes an id, times that reach every row."""
    far, early = clock.now() + timedelta(days=400), clock.now() - timedelta(days=400)
    special: dict[str, Any] = {
        "devices.set_capabilities": {"capabilities": [Declared(BUILTINS[SMS_SEND], granted=True)]},
        "devices.set_status": {"status": DeviceStatus.REVOKED},
        "invocations.answer": {"status": Status.DONE},
        "invocations.answer_with_presence": {"status": Status.DONE},
        "invocations.erase_texts": {"capabilities": ["set_light", "unlock_door", "sms_send"]},
        "invocations.resolve": {"invocation": dataclasses.replace(ids["invocation"], status=Status.DONE)},
        "approvals.decide": {
            "approval": dataclasses.replace(ids["approval"], status=ApprovalStatus.APPROVED)
        },
        "mandates.set_status": {"was": ids["mandate"].status, "status": MandateStatus.REVOKED},
        "sign_ins.save": {
            "was": ids["sign_in"].status,
            "sign_in": dataclasses.replace(ids["sign_in"], status=SignInStatus.DENIED),
        },
        "console_sessions.add": {"session": ids["session_console"]},
        "sessions.add_message": {"capabilities": ["sms_send"]},
        "events.erase_bodies": {"fields": ["text", "message"], "after": None},
        "invocations.add_late_report": {"status": "done"},
    }.get(f"{repository}.{method}", {})
    common: dict[str, Any] = {
        "at": far,
        "now": far,
        "until": far,
        "before": far,
        "received_at": far,
        "moved_at": far,
        "since": early,
        "limit": 100,
        "after": 0,
        "cap": 1000,
        "url": "https://b.example",
        "message": "m",
        "by": "b",
        "data": {"x": 1},
        "kind": TokenKind.AGENT,
        "target": None,
        "required": True,
        "sign_count": 99,
        "replace": True,
        "for_update": True,
        "used": {ids["credential_id"]: far},
        "record": AuditRecord("thing.done", "b"),
        "receipt": Receipt("rcp-b", ids["session_id"]),
        "triage": Triage(ids["session_id"], far),
        "status": "done",
        "was": None,
        "capabilities": [],
        "fields": [],
    }
    # Where two repositories name different ids alike.
    own: dict[str, Any] = {
        "console_sessions": {"session_id": ids["session_console"].session_id},
        "passkeys": {"credential_id": ids["passkey"].credential_id},
    }.get(repository, {})
    values = {**ids, **common, **own, **special}
    names = list(signature.parameters)[1:]
    unknown = [name for name in names if name not in values]
    assert unknown == [], f"{repository}.{method}: say here what of A's it takes as {unknown}"
    return [values[name] for name in names]


def _methods() -> list[tuple[str, str, inspect.Signature]]:
    """Every repository method of a unit of work, each repository's additions (and saves) first."""
    found = []
    for name, member in vars(ports.UnitOfWork).items():
        if not isinstance(member, property) or name == "tenant_id":
            continue
        repository = typing.get_type_hints(member.fget, vars(ports))["return"]
        methods = [m for m in vars(repository) if not m.startswith("_") and callable(getattr(repository, m))]
        methods.sort(key=lambda m: (m != "add", m not in ("save", "pause")))
        found += [(name, m, inspect.signature(getattr(repository, m))) for m in methods]
    return found


async def _calls(store: Store, b: str, ids: dict[str, Any], clock: FrozenClock) -> list[tuple[str, str]]:
    """B's answer to each call, each in a unit of work of its own."""
    answers = []
    for repository, method, signature in _methods():
        arguments = _arguments(repository, method, signature, ids, clock)
        try:
            async with store.unit_of_work(b) as uow:
                answer = repr(await getattr(getattr(uow, repository), method)(*arguments))
        except TapgateError as e:  # a store's own refusal (anything else fails the test)
            answer = f"{type(e).__name__}: {e}"
        answers.append((f"{repository}.{method}", answer))
    return answers


async def test_a_tenant_calling_every_repository_method_with_another_tenants_ids_never_reaches_its_rows(
    tmp_path: Path,
) -> None:
    a, b = tenant_name(), tenant_name()
    clock = FrozenClock()
    answers = []
    for name in ("with-a", "without-a"):
        path = tmp_path / f"{name}.db"
        await migrate(f"sqlite:///{path}")
        store = open_sql_store(f"sqlite:///{path}")
        try:
            if name == "with-a":
                await _seed_a(store, clock, a)
                _leave_pending(path, a)
                ids = await _a_and_its_ids(path, store, a, b)
                before = _rows(path, a)
            async with store.unit_of_work(b) as uow:
                await uow.tenants.add(Tenant(b, b, clock.now()))
            answers.append(await _calls(store, b, ids, clock))
        finally:
            await store.close()
        if name == "with-a":
            assert _rows(path, a) == before
    with_a, without_a = answers
    assert [x for x in zip(with_a, without_a, strict=True) if x[0] != x[1]] == []
    # The calls reached B's own rows: most answered, and what B added it read back.
    failed = [call for call, answer in with_a if "Error" in answer or "Conflict" in answer]
    assert len(failed) < len(with_a) // 5, failed
    assert b in dict(with_a)["devices.by_uid"]
