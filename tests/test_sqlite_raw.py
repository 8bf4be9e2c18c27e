"""The hot statements run straight on sqlite3 (``sqlite_raw.py``) answer exactly what SQLAlchemy answers
for them: the same rows with the same Python values (aware datetimes, booleans, numbers), the same counts
of changed rows, and the same refusal of a duplicate row."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.types import DateTime

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.raw import RawStatements
from tapgate.adapters.store.sql import SqlUnitOfWork, open_sql_store
from tapgate.adapters.store.sql_base import insert_into
from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import BUILTINS, SMS_SEND, Declared
from tapgate.domain.errors import StorageError
from tapgate.domain.invocations import Status
from tapgate.domain.mandates import Mandate, MandateStatus
from tapgate.ports import Store
from tests.test_store_contract_ports import _at, _invocation, _with_device

PARAMETERS: dict[str, Any] = {
    "id": "inv-1",
    "uid": "d" * 16,
    "user": "ana",
    "device": "phone",
    "agent": "agent",
    "caller": "agent",
    "session": "chat-1",
    "at": _at(5),
    "until": _at(60),
    "limit": 10,
    "after": 0,
    "status": Status.DONE.value,
    "resolved_at": _at(7),
    "message": "ok",
    "reason": None,
    "seq": 99,
    "hash": "f" * 64,
    "event_seq": 5,
    "today": "2026-03-01",
    "cap": 100,
    "via": "sms",
    "digest": "d" * 64,
    "decided_at": _at(8),
    "by": "device:phone",
    "now": _at(5),
    "day": "2026-03-01",
}
# The rows these read are not written here.
NOTHING_TO_FIND = {
    "CREDENTIAL",
    "SESSION",
    "PAUSED_UNTIL",
    "RECEIPT",
    "DECIDE",
    "TRIAGE",
    "MOVE_TRIAGE",
}
STATEMENTS = [name for name in dir(q) if name.isupper() and q.is_hot(getattr(q, name))]


async def rows_to_compare(store: Store) -> str:
    """A tenant with the rows the hot statements read and change."""
    tenant = await _with_device(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.devices.set_capabilities("d" * 16, (Declared(BUILTINS[SMS_SEND], granted=True),))
        for n in range(3):
            await uow.invocations.add(_invocation(tenant, f"inv-{n}", at=n))
        await uow.journal.append(AuditRecord("invocation.created", "agent:agent", subject="inv-1"), _at(1))
        await uow.events.append("ana", "invocation.created", {"id": "inv-1"}, _at(1))
        assert await uow.ingests.take("d" * 16, "2026-03-01", 100)
        live = Mandate(
            tenant,
            "inv-1",
            "ana",
            "agent",
            ("device__phone__sms_send",),
            {},
            3,
            2,
            "texts",
            _at(1),
            _at(3600),
            _at(60),
            MandateStatus.ACTIVE,
            used=1,
            used_today=1,
            day="2026-03-01",
        )
        await uow.mandates.add(live)
    return tenant


def found(rows: list[Any], rowcount: int | None) -> bool:
    """Whether a statement read a row or changed one (a driver may count no rows for a SELECT: -1)."""
    return bool(rows) or (rowcount or 0) > 0


@given(
    st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_a_time_is_written_on_sqlite_as_sqlalchemys_datetime_writes_it(when: datetime, minutes: int) -> None:
    """The store's own conversion of a time for SQLite (``UtcDateTime.bind_processor``) writes the text
    SQLAlchemy's DATETIME writes for the same UTC time, whatever zone it came in: the text is what SQLite
    compares and sorts, and rows written before it must still compare with rows written after."""
    dialect = sqlite.dialect()
    ours = t.UtcDateTime().dialect_impl(dialect).bind_processor(dialect)
    theirs = DateTime().dialect_impl(dialect).bind_processor(dialect)
    assert ours is not None and theirs is not None
    zoned = when.astimezone(timezone(timedelta(minutes=minutes)))
    assert ours(zoned) == theirs(when.replace(tzinfo=None))
    assert ours(None) is None
    with pytest.raises(ValueError, match="naive"):
        ours(when.replace(tzinfo=None))


def test_every_hot_statement_is_compiled_for_the_driver() -> None:
    raw = RawStatements(sqlite.dialect())
    assert len(STATEMENTS) >= 19
    for name in STATEMENTS:
        assert raw._compile(getattr(q, name), ()) is not None, name


def test_no_hot_statement_binds_a_value_that_decides_whether_a_partial_index_applies() -> None:
    """A partial index (``devices_live_id``: status != 'revoked') applies only where the statement's own
    WHERE implies its predicate. With the value bound as a parameter, SQLite cannot tell before binding,
    so it prepares the statement again at every run (the check chain's device lookup took 87 µs so, 13 µs
    with the value written in), and a PostgreSQL generic plan cannot use the index."""
    guarded = [
        f"{table.name}.{str(index.dialect_options['sqlite']['where']).split()[0]}"
        for table in t.metadata.tables.values()
        for index in table.indexes
        if index.dialect_options["sqlite"]["where"] is not None
    ]
    assert guarded == ["devices.status"]
    dialect = sqlite.dialect(paramstyle="qmark")
    for name in STATEMENTS:
        sql = str(getattr(q, name).compile(dialect=dialect))
        for column in guarded:
            assert not re.search(rf"{re.escape(column)}\s*(=|!=|<>|IN|NOT IN)\s*\(?\?", sql), (name, sql)
    assert "devices.status != 'revoked'" in str(q.LIVE_DEVICE_WITH_PAUSE.compile(dialect=dialect))


def test_a_hot_statement_that_names_a_row_by_its_key_searches_by_it_and_none_scans_a_table(
    sqlite_url: str,
) -> None:
    """SQLite chooses an index without statistics (tapgate runs no ANALYZE): given a call's tenant, device
    and id but not its user, the long-poll's delivery marks searched the device's index, every call the
    device ever had, for each mark; a batch of marks stalled a long-poll round trip for half a second
    once a device had a few thousand calls (and with three ids or more in an IN list, it still did). A
    statement that names a row by its tenant and its id (the first two columns of its table's primary
    key) must search by the primary key, with ten values in a list, and none may read a whole table."""
    path = sqlite_url.removeprefix("sqlite:///")
    dialect = sqlite.dialect(paramstyle="qmark")
    keys = {
        table.name: [c.name for c in table.primary_key.columns]
        for table in t.metadata.tables.values()
        if table.primary_key.columns
    }
    with contextlib.closing(sqlite3.connect(path)) as connection:
        by_primary_key = {
            table: f"sqlite_autoindex_{table}_1"
            for (table,) in connection.execute("SELECT tbl_name FROM sqlite_master WHERE type = 'table'")
        }
        named = 0
        for name in STATEMENTS:
            sql = re.sub(
                r"\(__\[POSTCOMPILE_\w+\]\)",
                "(" + ", ".join("?" * 10) + ")",
                str(getattr(q, name).compile(dialect=dialect)),
            )
            plan = [
                row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", [None] * sql.count("?"))
            ]
            assert not any(step.startswith("SCAN ") for step in plan), (name, plan)
            where = sql.partition(" WHERE ")[2].split(" RETURNING ")[0]
            for table, columns in keys.items():
                bound = [c for c in columns if re.search(rf"\b{table}\.{c} (= \?|IN \()", where)]
                # its tenant and its id (the calls' key goes on with their user: named or not, the key)
                if bound[:2] == columns[:2] and not re.search(r"\bFROM\b", where):  # the statement's own
                    named += 1
                    assert any(by_primary_key[table] in step for step in plan), (name, plan)
    assert named >= 8  # the calls' reads and writes by id among them


def test_a_hot_statement_that_names_its_tenant_searches_only_that_tenants_rows(sqlite_url: str) -> None:
    """Every search of a hot statement that names its tenant goes by an index that begins with the
    tenant: none reads other tenants' rows to find its own. (The count of a person's calls waiting for
    them to confirm searched by status alone: every tenant's open calls, on every call that asks.)"""
    path = sqlite_url.removeprefix("sqlite:///")
    dialect = sqlite.dialect(paramstyle="qmark")
    with contextlib.closing(sqlite3.connect(path)) as connection:
        for name in STATEMENTS:
            sql = re.sub(
                r"\(__\[POSTCOMPILE_\w+\]\)",
                "(" + ", ".join("?" * 10) + ")",
                str(getattr(q, name).compile(dialect=dialect)),
            )
            if "tenant_id = ?" not in sql:
                continue
            plan = [
                row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", [None] * sql.count("?"))
            ]
            searches = [step for step in plan if step.startswith("SEARCH ")]
            assert searches and all("(tenant_id=?" in step for step in searches), (name, plan)


@pytest.mark.parametrize("name", STATEMENTS)
async def test_a_hot_statement_answers_on_the_driver_what_it_answers_through_sqlalchemy(
    sqlite_url: str, name: str
) -> None:
    store = open_sql_store(sqlite_url)
    try:
        tenant = await rows_to_compare(store)
        statement, parameters = getattr(q, name), PARAMETERS | {"tenant": tenant}
        assert store.sqlite is not None
        conn = store.sqlite._connection()
        answers = []
        for direct in (False, True):
            with conn.begin() as transaction:
                if direct:
                    result: Any = store.sqlite._raw.run(
                        conn.connection.driver_connection, conn.info, statement, parameters
                    )
                else:
                    result = conn.execute(statement, parameters)
                rows = [tuple(r) for r in result] if statement.exported_columns else []
                answers.append((rows, result.rowcount if not rows else None))
                transaction.rollback()
        assert answers[1] == answers[0]
        if name not in NOTHING_TO_FIND:
            assert found(*answers[0]), "the statement found nothing to compare"
        for rows, _ in answers:
            for row in rows:
                for value in row:
                    assert not isinstance(value, datetime) or value.tzinfo is UTC
    finally:
        await store.close()


async def test_a_duplicate_row_on_the_driver_is_sqlalchemys_integrity_error(sqlite_url: str) -> None:
    store = open_sql_store(sqlite_url)
    try:
        tenant = await _with_device(store)
        row = {"tenant_id": tenant, "name": tenant, "created_at": _at(0)}
        assert store.sqlite is not None
        conn = store.sqlite._connection()
        with conn.begin(), pytest.raises(IntegrityError):
            store.sqlite._raw.run(conn.connection.driver_connection, conn.info, insert_into(t.tenants), row)
    finally:
        await store.close()


async def _write_then_fail(store: Any, tenant: str, through_sqlalchemy: bool) -> None:
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-lost"))  # a hot INSERT
        if through_sqlalchemy:
            await uow.pauses.pause("ana", "agent", _at(9))  # an UPDATE built per call
        raise RuntimeError("the unit of work fails after writing")


@pytest.mark.parametrize("through_sqlalchemy", [False, True])
async def test_a_unit_of_work_commits_all_of_its_rows_or_none(
    sqlite_url: str, through_sqlalchemy: bool
) -> None:
    """The driver begins and ends each unit of work; a statement that goes through SQLAlchemy joins it,
    and a failure after both leaves neither behind."""
    store = open_sql_store(sqlite_url)
    try:
        tenant = await _with_device(store)
        with pytest.raises(RuntimeError):
            await _write_then_fail(store, tenant, through_sqlalchemy)
        async with store.unit_of_work(tenant) as uow:
            assert await uow.invocations.get("ana", "inv-lost") is None
            assert await uow.pauses.paused_until("ana", "agent") is None
        async with store.unit_of_work(tenant) as uow:
            await uow.invocations.add(_invocation(tenant, "inv-kept"))
            if through_sqlalchemy:
                await uow.pauses.pause("ana", "agent", _at(9))
        async with store.unit_of_work(tenant) as uow:
            assert await uow.invocations.get("ana", "inv-kept") is not None
            assert (await uow.pauses.paused_until("ana", "agent") is not None) is through_sqlalchemy
    finally:
        await store.close()


async def _write_then_break(store: Store, tenant: str) -> None:
    async with store.unit_of_work(tenant) as uow:
        await uow.invocations.add(_invocation(tenant, "inv-lost"))
        assert isinstance(uow, SqlUnitOfWork)
        await uow.conn.execute(text("SELECT * FROM no_such_table"))


async def test_a_database_error_in_a_unit_of_work_is_a_storage_error_and_the_next_one_runs(
    sqlite_url: str,
) -> None:
    """What the driver raises inside a unit of work reaches the gateway as StorageError (whose message
    quotes no row), the unit of work is rolled back, and the connection serves the next one."""
    store = open_sql_store(sqlite_url)
    try:
        tenant = await _with_device(store)
        with pytest.raises(StorageError, match="The database failed"):
            await _write_then_break(store, tenant)
        async with asyncio.timeout(30), store.unit_of_work(tenant) as uow:
            assert await uow.invocations.get("ana", "inv-lost") is None
    finally:
        await store.close()
