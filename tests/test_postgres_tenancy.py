"""G14 on PostgreSQL: row-level security keeps tenants apart even for SQL that forgets to filter.

Every check connects as the app's own role (the one in database_url), never as a superuser, and loops
over ``TENANT_TABLES`` so that a new table is covered the day it is added.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import BigInteger, ForeignKeyConstraint, String, text

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.store.tables import APPEND_ONLY_TABLES, TENANT_TABLES, metadata
from tapgate.adapters.wake.local import LocalWake
from tapgate.domain.approvals import Decision
from tapgate.domain.console import SignInKind
from tapgate.domain.mandates import Mandate
from tapgate.domain.passkeys import Passkey
from tapgate.domain.principals import TokenKind
from tapgate.domain.proofs import SignedDecision, new_issuer_key
from tapgate.services import (
    accounts,
    answering,
    approving,
    console,
    devices,
    ingesting,
    invoking,
    pairings,
    sessions,
)
from tapgate.services.approving import DecisionBody
from tapgate.services.context import Context
from tapgate.services.invoking import Call
from tests.conftest import PostgresDatabase, blocking, tenant_name
from tests.world import LAMP, device_body

pytestmark = pytest.mark.postgres

MUTABLE_TABLES = tuple(t for t in TENANT_TABLES if t not in APPEND_ONLY_TABLES)
RLS_REFUSED = "violates row-level security policy"


@dataclass(frozen=True)
class TwoTenants:
    """Tenants A and B, each with an operator, one user of its own and an agent token for that user."""

    a: str
    b: str
    a_user: str = "ann"
    b_user: str = "bob"


async def _seed(url: str) -> TwoTenants:
    tenants = TwoTenants(tenant_name(), tenant_name())
    store = open_sql_store(url)
    clock = FrozenClock()
    try:
        for tenant, user in ((tenants.a, tenants.a_user), (tenants.b, tenants.b_user)):
            operator = await accounts.create_tenant(store, clock, tenant)
            caller = await accounts.authenticate(store, operator.token)
            await accounts.create_user(store, clock, caller, user, None)
            agent = await accounts.create_token(store, clock, caller, user, TokenKind.AGENT)
            await _seed_devices(store, clock, caller, user, agent.token)
            async with store.unit_of_work(tenant) as uow:
                await uow.journal.read(0, 1)  # seals what its writers left pending: rows in both tables
    finally:
        await store.close()
    await _seed_pending(url, tenants)
    return tenants


async def _seed_pending(url: str, tenants: TwoTenants) -> None:
    """An entry and an event waiting to be sealed, as a writer that found the head held leaves them (the
    store's sealer would seal any it left, so they are written the way it writes them, as the app)."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        for tenant, user in ((tenants.a, tenants.a_user), (tenants.b, tenants.b_user)):
            async with conn.transaction():
                await conn.execute("SELECT set_config('app.tenant_id', $1, true)", tenant)
                await conn.execute(
                    "INSERT INTO audit_pending (tenant_id, at, action, actor, outcome, subject, reason, data)"
                    " VALUES ($1, now(), 'thing.done', 'test', 'ok', '', '', '{}')",
                    tenant,
                )
                await conn.execute(
                    "INSERT INTO events_pending (tenant_id, user_id, type, data, created_at)"
                    " VALUES ($1, $2, 'thing', '{}', now())",
                    tenant,
                    user,
                )
    finally:
        await conn.close()


async def _seed_devices(store: Any, clock: FrozenClock, operator: Any, user: str, agent_token: str) -> None:
    """A device with capabilities, a claimed pairing, a session with a message: a row in every table."""
    phone = {"name": "phone_actions", "kind": "actuator"}
    door = LAMP | {"name": "unlock_door", "confirm": True}
    lamp = device_body(
        "desk-lamp",
        [LAMP, phone, door],
        grants=["set_light", "unlock_door"],
        push={"kind": "fcm", "token": "T"},
    )
    enrolled = await devices.enrol(store, clock, operator, user, lamp, 10)
    pairing = await pairings.start(store, clock, operator, user)
    assert pairing.code is not None
    await pairings.claim_code(store, clock, {"code": pairing.code, **device_body("phone", [LAMP])}, 10)
    agent = await accounts.authenticate(store, agent_token)
    await sessions.put(store, clock, agent, "chat-1", "chat", True)
    await sessions.record_message(store, clock, agent, "chat-1", "desk-lamp", ["phone_actions"])
    ctx = Context(store, clock, LocalWake(), device_channel=True)
    called = await invoking.invoke(ctx, agent, Call("device__desk_lamp__set_light", {"on": True}))
    assert called.status.value == "pending"
    principal = await accounts.authenticate(store, enrolled.token)
    device = await devices.authenticate_device(store, clock, principal)
    await answering.answer(ctx, device, called.id, "done", None)
    await ingesting.ingest(ctx, device, "sms", "+15550001111", "hello", clock.now())
    asked = await invoking.invoke(ctx, agent, Call("device__desk_lamp__unlock_door", {"on": True}))
    assert asked.status.value == "awaiting_approval"
    async with store.unit_of_work(operator.tenant_id) as uow:
        [approval] = [a for a in await uow.approvals.pending_for(user) if a.kind == "unlock_door"]
    denied = DecisionBody(Decision.DENIED, not_me=True)
    await approving.decide(ctx, operator, approval.approval_id, denied)
    await console.finish_sign_in(ctx, await console.create_link(ctx, operator, user), SignInKind.LINK, "seed")
    async with store.unit_of_work(operator.tenant_id) as uow:  # passkeys (DESIGN §22)
        uid = enrolled.device.device_uid
        await uow.passkeys.add(Passkey(operator.tenant_id, "cred-seed", uid, user, "cose", 0, clock.now()))
        await uow.passkeys.set_required(user, True)
        now = clock.now()  # a standing mandate
        await uow.mandates.add(
            Mandate(
                tenant_id=operator.tenant_id,
                mandate_id="mnd_seed",
                user_id=user,
                agent_id=None,
                tools=("device__desk_lamp__set_light",),
                constraints={},
                max_calls=1,
                per_day=None,
                purpose="seed",
                created_at=now,
                expires_at=now + timedelta(days=1),
                sign_until=now + timedelta(minutes=5),
            )
        )
        await uow.proofs.add_issuer_key(new_issuer_key(now))  # proofs: an issuer key, a kept signature
        await uow.proofs.keep_signature(
            SignedDecision(approval.approval_id, "desk-lamp", "p256", "key", "signature")
        )


@pytest.fixture(scope="module")
def seeded(postgres: PostgresDatabase) -> TwoTenants:
    """Seeded once per module through the service layer; every test rolls its own changes back."""
    return blocking(_seed(postgres.app_url))


@pytest.fixture
async def conn(postgres: PostgresDatabase) -> AsyncIterator[asyncpg.Connection]:
    """A connection as the app's role, exactly as the gateway connects."""
    connection = await asyncpg.connect(postgres.app_url, timeout=5)
    try:
        assert await connection.fetchval("SELECT current_user") == postgres.role
        yield connection
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def tenant_transaction(conn: asyncpg.Connection, tenant: str) -> AsyncIterator[None]:
    """A transaction in ``tenant``, set the way the store sets it, always rolled back."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute("SELECT set_config('app.tenant_id', $1, true)", tenant)
        yield
    finally:
        await transaction.rollback()


async def _tenants_visible(conn: asyncpg.Connection, table: str) -> list[str]:
    return [r["tenant_id"] for r in await conn.fetch(f"SELECT tenant_id FROM {table}")]


async def _insert(conn: asyncpg.Connection, table: str, row: dict[str, Any]) -> None:
    columns = ", ".join(row)
    placeholders = ", ".join(f"${i}" for i in range(1, len(row) + 1))
    await conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", *row.values())


def _with_fresh_key(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with new values for its key columns other than tenant_id, so only the tenant can clash."""
    fresh = dict(row)
    for column in metadata.tables[table].primary_key.columns:
        if column.name == "tenant_id":
            continue
        if isinstance(column.type, BigInteger):
            fresh[column.name] = row[column.name] + 1_000_000
        elif isinstance(column.type, String):
            fresh[column.name] = secrets.token_hex(8)[: column.type.length]
    return fresh


def _credential_row(tenant: str, user_id: str) -> dict[str, Any]:
    return {
        "tenant_id": tenant,
        "credential_id": secrets.token_hex(8),
        "kind": "user",
        "secret_hash": "0" * 64,
        "scopes": "approve",
        "user_id": user_id,
        "created_at": datetime(2026, 1, 1, tzinfo=UTC),
    }


@pytest.mark.parametrize("table", TENANT_TABLES)
async def test_a_tenant_transaction_reads_its_own_rows_and_none_of_another_tenant(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with tenant_transaction(conn, seeded.a):
        visible = await _tenants_visible(conn, table)
        filtered = await conn.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1", seeded.b)
    assert visible, f"tenant A sees none of its own {table} rows"
    assert set(visible) == {seeded.a}
    assert filtered == 0
    async with tenant_transaction(conn, seeded.b):
        assert set(await _tenants_visible(conn, table)) == {seeded.b}


@pytest.mark.parametrize("table", MUTABLE_TABLES)
async def test_a_tenant_transaction_updates_no_row_of_another_tenant(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with tenant_transaction(conn, seeded.a):
        theirs = await conn.execute(
            f"UPDATE {table} SET tenant_id = tenant_id WHERE tenant_id = $1", seeded.b
        )
        mine = await conn.execute(f"UPDATE {table} SET tenant_id = tenant_id WHERE tenant_id = $1", seeded.a)
    assert theirs == "UPDATE 0"
    assert mine != "UPDATE 0", f"tenant A cannot update its own {table} rows"


@pytest.mark.parametrize("table", MUTABLE_TABLES)
async def test_a_tenant_transaction_deletes_no_row_of_another_tenant(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with tenant_transaction(conn, seeded.a):
        theirs = await conn.execute(f"DELETE FROM {table} WHERE tenant_id = $1", seeded.b)
        mine = await conn.execute(f"DELETE FROM {table} WHERE tenant_id = $1", seeded.a)
    assert theirs == "DELETE 0"
    assert mine != "DELETE 0", f"tenant A cannot delete its own {table} rows"
    async with tenant_transaction(conn, seeded.b):
        assert await _tenants_visible(conn, table)


@pytest.mark.parametrize("table", MUTABLE_TABLES)
async def test_a_tenant_transaction_cannot_move_its_rows_into_another_tenant(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with tenant_transaction(conn, seeded.a):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match=RLS_REFUSED):
            await conn.execute(f"UPDATE {table} SET tenant_id = $1 WHERE tenant_id = $2", seeded.b, seeded.a)


@pytest.mark.parametrize("table", TENANT_TABLES)
async def test_a_tenant_transaction_cannot_insert_a_row_for_another_tenant(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with tenant_transaction(conn, seeded.b):
        row = dict(await conn.fetchrow(f"SELECT * FROM {table} LIMIT 1"))
    # A fresh key leaves nothing but the tenant to object to (tenants and audit_heads are keyed by the
    # tenant alone; PostgreSQL checks the policy before any constraint, so they fail on the policy too).
    row = _with_fresh_key(table, row)
    async with tenant_transaction(conn, seeded.a):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match=RLS_REFUSED):
            await _insert(conn, table, row)


@pytest.mark.parametrize("table", TENANT_TABLES)
async def test_a_transaction_that_sets_no_tenant_reads_no_rows(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with conn.transaction():
        assert await conn.fetchval("SELECT current_setting('app.tenant_id', true)") is None
        assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0
    async with tenant_transaction(conn, seeded.a):
        assert await _tenants_visible(conn, table)


@pytest.mark.parametrize("table", TENANT_TABLES)
async def test_a_pooled_connection_forgets_its_tenant_when_the_transaction_ends(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with conn.transaction():
        await conn.execute("SELECT set_config('app.tenant_id', $1, true)", seeded.a)
        assert await _tenants_visible(conn, table)
    async with conn.transaction():
        assert await conn.fetchval("SELECT current_setting('app.tenant_id', true)") == ""
        assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0
    assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0


async def test_the_stores_pooled_connection_reads_no_rows_after_a_tenant_unit_of_work(
    postgres: PostgresDatabase, seeded: TwoTenants
) -> None:
    store = open_sql_store(postgres.app_url, pool_size=1)
    try:
        async with store.unit_of_work(seeded.a) as uow:
            assert await uow.users.get(seeded.a_user) is not None
        assert store.engine.pool.checkedin() == 1
        async with store.engine.connect() as reused:
            # '' rather than NULL: this is the connection the unit of work used, not a new one.
            assert (
                await reused.execute(text("SELECT current_setting('app.tenant_id', true)"))
            ).scalar() == ""
            for table in TENANT_TABLES:
                assert (await reused.execute(text(f"SELECT count(*) FROM {table}"))).scalar() == 0
    finally:
        await store.close()


@pytest.mark.parametrize("table", APPEND_ONLY_TABLES)
async def test_the_app_role_cannot_update_or_delete_the_audit_journal_even_of_its_own_tenant(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with tenant_transaction(conn, seeded.a):
        assert await _tenants_visible(conn, table)
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            async with conn.transaction():
                await conn.execute(f"UPDATE {table} SET reason = 'rewritten' WHERE tenant_id = $1", seeded.a)
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            async with conn.transaction():
                await conn.execute(f"DELETE FROM {table} WHERE tenant_id = $1", seeded.a)


@pytest.mark.parametrize("table", TENANT_TABLES)
async def test_the_app_role_cannot_truncate_a_table_past_row_level_security(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str
) -> None:
    async with tenant_transaction(conn, seeded.a):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await conn.execute(f"TRUNCATE {table} CASCADE")
    async with tenant_transaction(conn, seeded.b):
        assert await _tenants_visible(conn, table)


async def test_a_row_cannot_reference_a_user_of_another_tenant(
    conn: asyncpg.Connection, seeded: TwoTenants
) -> None:
    async with tenant_transaction(conn, seeded.a):
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            async with conn.transaction():
                await _insert(conn, "credentials", _credential_row(seeded.a, seeded.b_user))
        await _insert(conn, "credentials", _credential_row(seeded.a, seeded.a_user))


async def test_every_table_forces_row_level_security_with_a_tenant_policy(
    conn: asyncpg.Connection,
) -> None:
    rows = await conn.fetch(
        """
        SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
               count(p.policyname) AS policies,
               bool_and(p.cmd = 'ALL' AND p.qual LIKE '%tenant_id%app.tenant_id%'
                        AND p.with_check LIKE '%tenant_id%app.tenant_id%') AS on_tenant
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_policies p ON p.schemaname = n.nspname AND p.tablename = c.relname
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version'
        GROUP BY c.relname, c.relrowsecurity, c.relforcerowsecurity
        """
    )
    tables = {r["relname"]: r for r in rows}
    assert set(TENANT_TABLES) <= set(tables), "a table of TENANT_TABLES is missing from the database"
    for name, row in tables.items():
        assert row["relrowsecurity"], f"{name}: row-level security is not enabled"
        assert row["relforcerowsecurity"], f"{name}: row-level security is not forced on its owner"
        assert row["policies"] >= 1, f"{name}: has no policy"
        assert row["on_tenant"], f"{name}: a policy does not check tenant_id on read and write"


async def test_the_app_role_owns_nothing_and_cannot_bypass_row_level_security(
    conn: asyncpg.Connection, postgres: PostgresDatabase
) -> None:
    role = await conn.fetchrow(
        "SELECT rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user"
    )
    assert dict(role) == {
        "rolsuper": False,
        "rolbypassrls": False,
        "rolcreaterole": False,
        "rolcreatedb": False,
    }
    tables = await conn.fetch("SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'public'")
    assert set(TENANT_TABLES) <= {r["tablename"] for r in tables}
    assert [r["tablename"] for r in tables if r["tableowner"] == postgres.role] == []
    owned = await conn.fetchval(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)"
    )
    assert owned == 0
    assert await conn.fetchval("SELECT has_schema_privilege('public', 'CREATE')") is False
    for table in TENANT_TABLES:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="must be owner"):
            await conn.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")


async def test_the_tenant_list_function_shows_every_tenant_to_the_app_role_and_nothing_else(
    conn: asyncpg.Connection, postgres: PostgresDatabase, seeded: TwoTenants
) -> None:
    definer = await conn.fetchrow(
        "SELECT p.prosecdef, r.rolname AS owner FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner "
        "WHERE p.proname = 'tapgate_tenant_ids'"
    )
    assert definer["prosecdef"]
    assert definer["owner"] != postgres.role
    async with conn.transaction():
        listed = {r[0] for r in await conn.fetch("SELECT tapgate_tenant_ids()")}
        assert await conn.fetchval("SELECT count(*) FROM tenants") == 0
    assert {seeded.a, seeded.b} <= listed
    store = open_sql_store(postgres.app_url)
    try:
        assert {seeded.a, seeded.b} <= set(await store.tenant_ids())
    finally:
        await store.close()


FOREIGN_KEYS = [
    pytest.param(table.name, "+".join(fk.column_keys), id=f"{table.name}.{'+'.join(fk.column_keys)}")
    for table in metadata.sorted_tables
    for fk in sorted(table.foreign_key_constraints, key=lambda f: f.column_keys)
    if "tenant_id" in fk.referred_table.c and set(fk.column_keys) != {"tenant_id"}
]


def _foreign_key(table: str, columns: str) -> ForeignKeyConstraint:
    """The table's foreign key over exactly these columns (keys are unnamed: the columns name them)."""
    return next(
        fk for fk in metadata.tables[table].foreign_key_constraints if "+".join(fk.column_keys) == columns
    )


@pytest.mark.parametrize(("table", "name"), FOREIGN_KEYS)
def test_every_key_that_points_at_a_tenant_table_carries_the_tenant(table: str, name: str) -> None:
    fk = _foreign_key(table, name)
    pairs = {e.parent.name: e.column.name for e in fk.elements}
    assert pairs.get("tenant_id") == "tenant_id", f"{table}: {pairs} lets a row point into another tenant"


@pytest.mark.parametrize(("table", "name"), FOREIGN_KEYS)
async def test_a_row_cannot_reference_a_row_of_another_tenant_through_any_foreign_key(
    conn: asyncpg.Connection, seeded: TwoTenants, table: str, name: str
) -> None:
    fk = _foreign_key(table, name)
    pairs = [(e.parent.name, e.column.name) for e in fk.elements if e.parent.name != "tenant_id"]
    parent = fk.referred_table.name
    referred = ", ".join(p for _, p in pairs)
    async with tenant_transaction(conn, seeded.a):
        own = {tuple(r) for r in await conn.fetch(f"SELECT {referred} FROM {parent}")}
    async with tenant_transaction(conn, seeded.b):
        others = [r for r in await conn.fetch(f"SELECT {referred} FROM {parent}") if tuple(r) not in own]
    assert others, f"no {parent} row of the other tenant that this tenant lacks"
    theirs = others[0]
    async with tenant_transaction(conn, seeded.a):
        mine = await conn.fetchrow(f"SELECT * FROM {table} LIMIT 1")
        assert mine is not None, f"no {table} row seeded"
        row = _with_fresh_key(table, dict(mine))
        for child, referred in pairs:
            row[child] = theirs[referred]
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            async with conn.transaction():
                await _insert(conn, table, row)
