"""Whether a database is at the latest schema is read without Alembic (schema_version.py), and reads what
Alembic reads: the same revisions and latest one from the migration files, the same revision of a database
with none, one behind, at the latest, or at one this tapgate does not know. And the process that serves
never loads Alembic (nor, on SQLite, aiosqlite, which the store does not use)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory

from tapgate.adapters.store import schema_version
from tapgate.adapters.store.migrate import MIGRATIONS, upgrade
from tapgate.adapters.store.schema_version import pending_migrations
from tapgate.adapters.store.urls import engine_url
from tapgate.domain.errors import ConfigurationError


def _scripts() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config)


def test_the_revisions_and_the_latest_are_alembics() -> None:
    scripts = _scripts()
    assert schema_version.revisions() == {s.revision: s.down_revision for s in scripts.walk_revisions()}
    assert schema_version.head() == scripts.get_current_head()


def _set_revision(path: Path, revision: str) -> None:
    with sa.create_engine(f"sqlite:///{path}").begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


async def test_a_database_is_behind_until_it_is_at_the_latest_revision(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    url = f"sqlite:///{path}"
    sa.create_engine(url).connect().close()  # an empty database: no schema at all
    assert await pending_migrations(url) is True
    await upgrade(engine_url(url))
    assert await pending_migrations(url) is False
    first = min(schema_version.revisions())
    _set_revision(path, first)
    assert await pending_migrations(url) is True


async def test_a_database_at_a_revision_this_tapgate_does_not_know_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    url = f"sqlite:///{path}"
    await upgrade(engine_url(url))
    _set_revision(path, "9999")
    with pytest.raises(ConfigurationError, match="newer than this tapgate knows"):
        await pending_migrations(url)


def test_the_check_before_serving_loads_no_alembic(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    url = f"sqlite:///{path}"
    check = (
        "import asyncio, sys\n"
        "from tapgate.adapters.store.schema_version import pending_migrations\n"
        f"print(asyncio.run(pending_migrations({url!r})))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako', 'aiosqlite')))\n"
    )
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert ran.stdout.split("\n")[:2] == ["True", "[]"]
