"""Whether a database is at the latest schema, read without loading Alembic.

``tapgate serve`` asks before it serves, in the process that then serves: Alembic, with Mako, is
megabytes of memory in a process that never migrates. So the revisions are read
from the migration files' own ``revision`` and ``down_revision`` lines, and the database's revision from
Alembic's version table; ``migrate.py`` migrates with Alembic itself. ``tests/test_schema_version.py``
holds what is read here equal to what Alembic reads.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from tapgate.adapters.store.urls import engine_url
from tapgate.domain.errors import ConfigurationError

VERSIONS = Path(__file__).parent / "migrations" / "versions"
VERSION_TABLE = "alembic_version"  # Alembic's own name for it
_LINE = re.compile(r"^(revision|down_revision)\s*=\s*(?:\"([^\"]+)\"|None)\s*$", re.MULTILINE)


@functools.cache
def revisions() -> dict[str, str | None]:
    """Every revision of the migration files, with the one it revises (None for the first)."""
    found: dict[str, str | None] = {}
    for path in sorted(VERSIONS.glob("[0-9]*.py")):
        lines = {m.group(1): m.group(2) for m in _LINE.finditer(path.read_text(encoding="utf-8"))}
        if "revision" not in lines or lines["revision"] is None or "down_revision" not in lines:
            raise ConfigurationError(f"The migration {path.name} names no revision.")
        found[lines["revision"]] = lines["down_revision"]
    return found


def head() -> str:
    """The latest revision: the one no other revises. Raises ConfigurationError if there is not one."""
    revised = set(revisions().values())
    heads = [r for r in revisions() if r not in revised]
    if len(heads) != 1:
        raise ConfigurationError(f"The migrations have {len(heads)} latest revisions; they need one.")
    return heads[0]


def _current(sync: Connection) -> str | None:
    if not inspect(sync).has_table(VERSION_TABLE):
        return None
    found = [row[0] for row in sync.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]  # noqa: S608
    if len(found) > 1:
        raise ConfigurationError("The database is at more than one schema revision; run 'tapgate migrate'.")
    return found[0] if found else None


async def pending_migrations(database_url: str) -> bool:
    """True when the database is behind the latest schema (or has none).

    Raises ConfigurationError when the database is at a revision this tapgate does not know (it was
    migrated by a newer release).
    """
    latest = head()
    url = engine_url(database_url)
    if url.get_backend_name() == "sqlite":  # on the driver the store uses: aiosqlite is not loaded for it
        engine = create_engine(url.set(drivername="sqlite+pysqlite"))
        try:
            with engine.connect() as sync:
                current = _current(sync)
        finally:
            engine.dispose()
    else:
        async_engine = create_async_engine(url)
        try:
            async with async_engine.connect() as conn:
                current = await conn.run_sync(_current)
        finally:
            await async_engine.dispose()
    if current is not None and current not in revisions():
        raise ConfigurationError(
            f"The database is at schema {current}, newer than this tapgate knows ({latest}); upgrade tapgate."
        )
    return current != latest
