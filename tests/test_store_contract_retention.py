"""The Store contract for retention (DESIGN §15): erasing forwarded messages, call texts and approval
messages behaves the same on the memory store, SQLite and PostgreSQL; and the search for messages that
became old goes along the events' key from where the last round ended, not over the whole history."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from datetime import datetime
from typing import Any

import asyncpg
import pytest
from sqlalchemy.dialects.postgresql.asyncpg import dialect as postgres_dialect
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

from tapgate.adapters.store.sql_journal import events_to_erase, first_made_from
from tapgate.domain.events import INGEST_MESSAGE
from tapgate.domain.inbox import erased_preview
from tapgate.domain.invocations import Status
from tapgate.ports import Store
from tests.conftest import PostgresDatabase
from tests.test_store_contract_ports import NOW, _approval, _at, _invocation, _with_device, _world

# A body that holds the very text an erased event's JSON holds: it must be erased all the same.
TRICKY = 'see "erased": true and "body": ""'
FIELDS = ("body", "sender")


def _message(body: str) -> dict[str, Any]:
    return {"channel": "sms", "sender": "+15550001111", "body": body, "session_id": "s-1"}


async def _bodies(store: Store, tenant: str) -> list[tuple[int, str, bool]]:
    async with store.unit_of_work(tenant) as uow:
        events = await uow.events.read("ana", 0, 100)
    return [(e.seq, str(e.data.get("body", "-")), bool(e.data.get("erased"))) for e in events]


async def test_messages_made_before_the_bound_are_erased_once_and_the_events_stay(store: Store) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.events.append("ana", INGEST_MESSAGE, _message("old words"), _at(0))
        await uow.events.append("ana", INGEST_MESSAGE, _message(TRICKY), _at(1))
        await uow.events.append("ana", "invocation.resolved", {"body": "not a message"}, _at(2))
        await uow.events.append("ana", INGEST_MESSAGE, _message("new words"), _at(10))
    async with store.unit_of_work(tenant) as uow:
        # two erased; every event up to the third is old, the fourth is not
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(10)) == (2, 3)
    assert await _bodies(store, tenant) == [
        (1, "", True),
        (2, "", True),
        (3, "not a message", False),
        (4, "new words", False),
    ]
    async with store.unit_of_work(tenant) as uow:
        (first,) = await uow.events.read("ana", 0, 1)
        assert dict(first.data) == {**_message(""), "sender": "", "erased": True}
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(10)) == (0, 3)  # once
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(11), after=3) == (1, 4)
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(12), after=4) == (0, 4)
    assert (await _bodies(store, tenant))[3] == (4, "", True)
    async with store.unit_of_work(await _world(store)) as uow:  # a tenant with no events
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(12)) == (0, 0)


async def test_messages_erased_after_a_number_are_those_numbered_after_it_in_the_tenant(store: Store) -> None:
    tenant = await _world(store)
    other = await _world(store)
    for t in (tenant, other):
        async with store.unit_of_work(t) as uow:
            for at in (0, 5, 6, 9):
                await uow.events.append("ana", INGEST_MESSAGE, _message(f"at {at}"), _at(at))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(9), after=1) == (2, 3)
    assert [erased for _, _, erased in await _bodies(store, tenant)] == [False, True, True, False]
    assert [erased for _, _, erased in await _bodies(store, other)] == [False] * 4  # its own tenant's


async def test_an_old_message_numbered_after_a_young_one_is_erased_by_a_whole_round_or_later_never_skipped(
    store: Store,
) -> None:
    """A clock set forward and back stamps a later message older than an earlier one. A round over every
    event erases it at once; a round from a number waits for the younger one to be old, and never
    passes it."""
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        for at in (0, 20, 1):
            await uow.events.append("ana", INGEST_MESSAGE, _message(f"at {at}"), _at(at))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(10)) == (2, 1)
        await uow.events.append("ana", INGEST_MESSAGE, _message("at 2"), _at(2))
    assert [erased for _, _, erased in await _bodies(store, tenant)] == [True, False, True, False]
    async with store.unit_of_work(tenant) as uow:
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(10), after=1) == (0, 1)
        assert await uow.events.erase_bodies(INGEST_MESSAGE, FIELDS, _at(21), after=1) == (2, 4)
    assert [erased for _, _, erased in await _bodies(store, tenant)] == [True, True, True, True]


async def test_call_texts_of_resolved_calls_made_before_the_bound_are_erased_and_each_row_counts_once(
    store: Store,
) -> None:
    tenant = await _with_device(store)
    sms = {"to": "+15550002222", "body": "secret"}
    calls = {
        "sms-old": _invocation(tenant, "sms-old", at=0, capability="sms_send"),
        "lamp-old": _invocation(tenant, "lamp-old", at=1),
        "sms-open": _invocation(tenant, "sms-open", at=2, capability="sms_send", expires=600),
        "sms-new": _invocation(tenant, "sms-new", at=20, capability="sms_send", expires=600),
    }
    async with store.unit_of_work(tenant) as uow:
        for call in calls.values():
            await uow.invocations.add(replace(call, arguments=sms) if call.capability == "sms_send" else call)
    async with store.unit_of_work(tenant) as uow:
        for invocation_id in ("sms-old", "lamp-old", "sms-new"):
            found = await uow.invocations.get("ana", invocation_id)
            assert found is not None
            done = replace(found, status=Status.DONE, resolved_at=_at(3), message=f"{invocation_id} ok")
            assert await uow.invocations.resolve(done)
    async with store.unit_of_work(tenant) as uow:
        # sms-old loses its arguments and its text (one row), lamp-old its text only; sms-open is open
        assert await uow.invocations.erase_texts(_at(10), ("sms_send",)) == 2
        assert await uow.invocations.erase_texts(_at(10), ("sms_send",)) == 0
        rows = {i: await uow.invocations.get("ana", i) for i in calls}
    seen = {i: (dict(r.arguments), r.message, r.arguments_sha256) for i, r in rows.items() if r is not None}
    assert seen == {
        "sms-old": ({}, None, "a" * 64),
        "lamp-old": ({"on": True}, None, "a" * 64),  # a lamp's arguments are no message
        "sms-open": (sms, None, "a" * 64),
        "sms-new": (sms, "sms-new ok", "a" * 64),
    }


async def test_approval_messages_made_before_the_bound_are_erased_and_the_decision_stays(
    store: Store,
) -> None:
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        for approval_id, at, kind in (
            ("apr-old", 0, "sms_send"),
            ("apr-door", 1, "door"),
            ("apr-new", 20, "sms_send"),
        ):
            await uow.invocations.add(_invocation(tenant, f"inv-{approval_id}", at=at, expires=600))
            approval = replace(
                _approval(tenant, approval_id, at),
                kind=kind,
                tool="device__phone__sms_send",
                arguments={"body": "secret"},
                preview={"kind": kind, "fields": [{"label": "Message", "value": "secret"}]},
            )
            await uow.approvals.add(approval)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.approvals.erase_texts(_at(10), ("sms_send",)) == 1
        assert await uow.approvals.erase_texts(_at(10), ("sms_send",)) == 0
        old, door, new = [await uow.approvals.get(a) for a in ("apr-old", "apr-door", "apr-new")]
    assert old is not None and door is not None and new is not None
    assert old.arguments is None and dict(old.preview) == erased_preview("sms_send")
    assert old.status == new.status and old.binding_code == new.binding_code
    assert door.arguments == {"body": "secret"} and new.arguments == {"body": "secret"}


# The search for what became old


def _plan_texts(query: Any, dialect: Any) -> tuple[str, list[Any]]:
    """``query`` as the driver gets it, with its parameters in order."""
    compiled = query.compile(dialect=dialect)
    return compiled.string, [compiled.params[name] for name in compiled.positiontup or ()]


SEARCHES = {
    "first made from the bound": first_made_from("t", 100, NOW),
    "events to erase": events_to_erase("t", INGEST_MESSAGE, NOW, 100, 200),
}


@pytest.mark.parametrize("search", SEARCHES)
def test_on_sqlite_the_search_for_what_became_old_goes_along_the_events_key(
    sqlite_url: str, search: str
) -> None:
    sql, params = _plan_texts(SEARCHES[search], sqlite_dialect())
    text = [p.strftime("%Y-%m-%d %H:%M:%S.%f") if isinstance(p, datetime) else p for p in params]
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        plan = " ".join(str(row[-1]) for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", text))
    assert re.search(
        r"SEARCH events USING (PRIMARY KEY|INDEX sqlite_autoindex_events_1) \(tenant_id=\? AND seq>\?", plan
    ), plan
    assert "TEMP B-TREE" not in plan  # in the key's order: the first found ends the search


@pytest.mark.postgres
@pytest.mark.parametrize("search", SEARCHES)
async def test_on_postgresql_the_search_for_what_became_old_goes_along_the_events_key(
    postgres: PostgresDatabase, search: str
) -> None:
    sql, params = _plan_texts(SEARCHES[search], postgres_dialect())
    db = await asyncpg.connect(postgres.admin_url)
    try:
        await db.execute("SET enable_seqscan = off")  # so a key that serves is taken, on few rows too
        await db.execute(f"PREPARE search AS {sql}")
        values = ", ".join("'{}'".format(str(p).replace("'", "''")) for p in params)
        plan = "\n".join(row[0] for row in await db.fetch(f"EXPLAIN EXECUTE search({values})"))
    finally:
        await db.close()
    assert re.search(r"Index (Only )?Scan using \w*events\w* on events", plan), plan
    assert re.search(r"Index Cond: .*tenant_id.*seq > ", plan), plan
    assert "Sort" not in plan, plan
