"""Bring a database to the latest schema; on PostgreSQL also set up the app's own role.

On PostgreSQL the tables belong to the admin role that migrates, and the app connects as the role named
in ``database_url``: a login role that owns no table, is no superuser and cannot bypass row-level
security. It gets exactly the rights it needs, and the audit journal is insert-only for it.
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import create_async_engine

from tapgate.adapters.store.tables import APPEND_ONLY_TABLES, TENANT_TABLES
from tapgate.adapters.store.urls import engine_url
from tapgate.domain.errors import ConfigurationError

MIGRATIONS = Path(__file__).parent / "migrations"
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


def _alembic_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


async def upgrade(url: URL) -> None:
    """Run every pending migration over ``url`` (an async SQLAlchemy URL)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(lambda sync: command.upgrade(_alembic_config(sync), "head"))
            await conn.commit()
    finally:
        await engine.dispose()


def _ident(name: str | None, what: str) -> str:
    if not name or not _IDENT.fullmatch(name):
        raise ConfigurationError(
            f"{what} {name!r} must be lower-case letters, digits and '_' to be used as a PostgreSQL name."
        )
    return name


def _asyncpg_dsn(url: URL, database: str) -> str:
    return url.set(drivername="postgresql", database=database).render_as_string(hide_password=False)


async def migrate(database_url: str, admin_url: str | None = None) -> str:
    """Migrate the database of ``database_url``; return a sentence saying what was done."""
    app = engine_url(database_url)
    if app.get_backend_name() == "sqlite":
        if app.database and app.database != ":memory:":
            # The database holds push addresses and forwarded messages: only its owner may read it.
            Path(app.database).touch(mode=0o600, exist_ok=True)  # noqa: ASYNC240 (once, before migrating)
        await upgrade(app)
        return f"SQLite database {app.database} is at the latest schema."
    if not admin_url:
        raise ConfigurationError(
            "Migrating PostgreSQL needs an admin URL (a role that may create roles and tables): pass "
            "--admin-url or set TAPGATE_ADMIN_DATABASE_URL; database_url names the app's own role."
        )
    admin = engine_url(admin_url)
    database = _ident(app.database, "the database in database_url")
    role = _ident(app.username, "the user in database_url")
    if admin.username == role:
        raise ConfigurationError(
            "database_url and the admin URL use the same role; the app's role must not own the tables."
        )
    await _ensure_database_and_role(admin, database, role, app.password)
    await upgrade(admin.set(database=database))
    await _grant(admin, database, role)
    return f"PostgreSQL database {database} is at the latest schema; the app connects as {role}."


async def _ensure_database_and_role(admin: URL, database: str, role: str, password: str | None) -> None:
    conn = await asyncpg.connect(_asyncpg_dsn(admin, admin.database or "postgres"))
    try:
        me = await conn.fetchrow(
            "SELECT rolsuper, rolbypassrls, rolcreaterole FROM pg_roles WHERE rolname = current_user"
        )
        if not (me["rolsuper"] or (me["rolbypassrls"] and me["rolcreaterole"])):
            raise ConfigurationError(
                "The admin URL's role must be a superuser, or have CREATEROLE and BYPASSRLS, to migrate."
            )
        existing = await conn.fetchrow(
            "SELECT rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = $1", role
        )
        if existing is None:
            await conn.execute(
                f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT"
            )
        elif any(existing[flag] for flag in ("rolsuper", "rolbypassrls", "rolcreaterole", "rolcreatedb")):
            # CREATEROLE alone lets a role grant itself other roles' rights, so it is refused too.
            raise ConfigurationError(
                f"The app role {role} is a superuser, bypasses row-level security, or may create roles or "
                "databases; give the app a plain role of its own in database_url."
            )
        if password:
            await conn.execute(f"ALTER ROLE {role} PASSWORD " + _literal(password))
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database):
            await conn.execute(f"CREATE DATABASE {database}")
    finally:
        await conn.close()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


async def _grant(admin: URL, database: str, role: str) -> None:
    conn = await asyncpg.connect(_asyncpg_dsn(admin, database))
    try:
        async with conn.transaction():
            await conn.execute(f"GRANT CONNECT ON DATABASE {database} TO {role}")
            # A reading unit of work's functions live in the session's temporary schema (postgres_raw.py).
            await conn.execute(f"GRANT TEMPORARY ON DATABASE {database} TO {role}")
            # Before PostgreSQL 15 every role may create objects in public; the app may not.
            await conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            await conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
            for table in TENANT_TABLES:
                rights = "SELECT, INSERT" if table in APPEND_ONLY_TABLES else "SELECT, INSERT, UPDATE, DELETE"
                await conn.execute(f"REVOKE ALL ON {table} FROM {role}")
                await conn.execute(f"GRANT {rights} ON {table} TO {role}")
            await conn.execute(f"GRANT SELECT ON alembic_version TO {role}")
            await conn.execute(f"GRANT EXECUTE ON FUNCTION tapgate_tenant_ids() TO {role}")
    finally:
        await conn.close()
