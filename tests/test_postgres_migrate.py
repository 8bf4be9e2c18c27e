"""`tapgate migrate` on PostgreSQL: idempotent, refuses unsafe roles, and guards `tapgate serve`."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.migrate import migrate
from tapgate.adapters.store.schema_version import pending_migrations
from tapgate.adapters.store.sql import open_sql_store
from tapgate.domain.errors import ConfigurationError
from tapgate.services import accounts
from tests.conftest import ADMIN_URL, PostgresDatabase, tenant_name

pytestmark = pytest.mark.postgres


@dataclass(frozen=True)
class Throwaway:
    """A database name and a role name that exist only for one test; the fixture drops both."""

    database: str
    role: str

    def url(self, role: str | None = None, password: str | None = None) -> str:
        """database_url for this database, on the admin's server, as ``role`` (the app's by default)."""
        url = make_url(ADMIN_URL).set(username=role or self.role, password=password, database=self.database)
        return url.render_as_string(hide_password=False)


async def _admin(sql: str, *args: object) -> object:
    conn = await asyncpg.connect(ADMIN_URL, timeout=5)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def _database_exists(name: str) -> bool:
    return bool(await _admin("SELECT count(*) FROM pg_database WHERE datname = $1", name))


@pytest.fixture
async def throwaway(postgres: PostgresDatabase) -> AsyncIterator[Throwaway]:
    suffix = secrets.token_hex(4)
    names = Throwaway(f"tapgate_scratch_{suffix}", f"tapgate_scratch_app_{suffix}")
    try:
        yield names
    finally:
        await _admin(f"DROP DATABASE IF EXISTS {names.database} WITH (FORCE)")
        await _admin(f"DROP ROLE IF EXISTS {names.role}")


async def _tapgate(*args: str, cwd: Path) -> tuple[int, str, str]:
    """Run the real command line in a child process with no TAPGATE_* variables of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-m", "tapgate", *args], cwd=cwd, env=env, check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _settings_file(tmp_path: Path, database_url: str) -> Path:
    path = tmp_path / "tapgate.toml"
    path.write_text(f'database_url = "{database_url}"\n')
    return path


async def test_migrating_twice_keeps_the_schema_at_head_the_data_and_the_app_roles_rights(
    postgres: PostgresDatabase,
) -> None:
    store = open_sql_store(postgres.app_url)
    try:
        operator = await accounts.create_tenant(store, FrozenClock(), tenant_name())
    finally:
        await store.close()

    said = [await migrate(postgres.app_url, ADMIN_URL) for _ in range(2)]

    assert said == 2 * [
        f"PostgreSQL database {postgres.name} is at the latest schema; the app connects as {postgres.role}."
    ]
    assert await pending_migrations(postgres.app_url) is False
    conn = await asyncpg.connect(postgres.app_url, timeout=5)
    try:
        rights = await conn.fetchrow(
            "SELECT has_table_privilege('users', 'UPDATE') AS users_update, "
            "has_table_privilege('audit_entries', 'INSERT') AS audit_insert, "
            "has_table_privilege('audit_entries', 'UPDATE') AS audit_update, "
            "has_table_privilege('audit_entries', 'DELETE') AS audit_delete"
        )
    finally:
        await conn.close()
    assert dict(rights) == {
        "users_update": True,
        "audit_insert": True,
        "audit_update": False,
        "audit_delete": False,
    }
    store = open_sql_store(postgres.app_url)
    try:
        assert (await accounts.authenticate(store, operator.token)).credential_id == operator.credential_id
    finally:
        await store.close()


@pytest.mark.parametrize("admin_url", [None, ""])
async def test_migrate_refuses_postgresql_without_an_admin_url(
    throwaway: Throwaway, admin_url: str | None
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await migrate(throwaway.url(), admin_url)
    assert "admin URL" in refused.value.message
    assert "--admin-url" in refused.value.message
    assert refused.value.message.endswith(".")
    assert not await _database_exists(throwaway.database)


async def test_migrate_refuses_when_the_app_and_the_admin_use_the_same_role(throwaway: Throwaway) -> None:
    admin_role = make_url(ADMIN_URL).username
    assert admin_role

    with pytest.raises(ConfigurationError) as refused:
        await migrate(throwaway.url(role=admin_role), ADMIN_URL)

    assert "same role" in refused.value.message
    assert refused.value.message.endswith(".")
    assert not await _database_exists(throwaway.database)


@pytest.mark.parametrize("power", ["SUPERUSER", "BYPASSRLS", "CREATEROLE", "CREATEDB"])
async def test_migrate_refuses_an_app_role_with_powers_beyond_its_own_rows(
    throwaway: Throwaway, power: str
) -> None:
    await _admin(f"CREATE ROLE {throwaway.role} LOGIN {power}")

    with pytest.raises(ConfigurationError) as refused:
        await migrate(throwaway.url(), ADMIN_URL)

    assert throwaway.role in refused.value.message
    assert "give the app a plain role of its own" in refused.value.message
    assert refused.value.message.endswith(".")
    assert not await _database_exists(throwaway.database)


async def test_migrate_refuses_an_admin_role_that_cannot_create_roles(
    throwaway: Throwaway, postgres: PostgresDatabase
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await migrate(throwaway.url(), postgres.app_url)

    assert "admin URL's role must be a superuser" in refused.value.message
    assert not await _database_exists(throwaway.database)


async def test_tapgate_migrate_sets_up_a_fresh_database_and_its_app_role_from_the_command_line(
    throwaway: Throwaway, tmp_path: Path
) -> None:
    app_url = throwaway.url(password="app-secret")
    config = _settings_file(tmp_path, app_url)

    code, out, err = await _tapgate(
        "migrate", "--config", str(config), "--admin-url", ADMIN_URL, cwd=tmp_path
    )

    assert (code, err) == (0, "")
    assert out.strip() == (
        f"PostgreSQL database {throwaway.database} is at the latest schema; "
        f"the app connects as {throwaway.role}."
    )
    assert "app-secret" not in out
    assert await pending_migrations(app_url) is False
    conn = await asyncpg.connect(app_url, timeout=5)
    try:
        role = await conn.fetchrow(
            "SELECT rolcanlogin, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
    finally:
        await conn.close()
    assert dict(role) == {"rolcanlogin": True, "rolsuper": False, "rolbypassrls": False}

    # The app's own role can now do the work, across processes: create a tenant, verify the journal.
    code, out, err = await _tapgate("tenant", "create", "acme", "--config", str(config), cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1].startswith("tgo_acme_")
    code, out, err = await _tapgate("audit", "verify", "--config", str(config), cwd=tmp_path)
    assert (code, err) == (0, "")
    assert "tenant acme: 2 entries, chain intact" in out


async def test_tapgate_serve_refuses_to_start_on_a_database_that_was_not_migrated(
    throwaway: Throwaway, tmp_path: Path
) -> None:
    await _admin(f"CREATE ROLE {throwaway.role} LOGIN")
    await _admin(f"CREATE DATABASE {throwaway.database}")
    assert await pending_migrations(throwaway.url()) is True
    config = _settings_file(tmp_path, throwaway.url())

    code, _, err = await _tapgate(
        "serve", "--config", str(config), "--host", "127.0.0.1", "--port", "0", cwd=tmp_path
    )

    assert code == 1
    assert "tapgate migrate" in err
    assert "latest schema" in err
