"""Helpers of the reliability families: how many trials to run, and reading a database as it really is.

``make test`` runs a fast slice of every family; ``make reliability`` sets TAPGATE_RELIABILITY=full and
runs the full counts. Every family prints what it ran, so `make reliability` output gives the figures of
docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
from typing import Any

import asyncpg

FULL = os.environ.get("TAPGATE_RELIABILITY", "").lower() == "full"


def scaled(fast: int, full: int) -> int:
    """``full`` under `make reliability`, ``fast`` otherwise."""
    return full if FULL else fast


def report(family: str, **figures: object) -> None:
    """One line of figures for docs/reliability.md (pytest -s shows it; `make reliability` keeps it)."""
    line = f"RELIABILITY {family}: " + ", ".join(f"{k}={v}" for k, v in figures.items())
    with open(os.environ.get("TAPGATE_RELIABILITY_LOG", os.devnull), "a", encoding="utf-8") as out:
        out.write(line + "\n")


class Database:
    """Plain SQL on the database behind a gateway, past the app: SQLite by file, PostgreSQL as the admin
    (who is not subject to row-level security), for checks that must see every row."""

    def __init__(self, url: str, admin_url: str | None = None) -> None:
        self.url = url
        self.admin_url = admin_url

    async def rows(self, sql: str, *args: object) -> list[dict[str, Any]]:
        """Rows of ``sql``, whose parameters are written ``$1``, ``$2``…"""
        if self.url.startswith("sqlite"):
            path = self.url.split("///", 1)[1]
            with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
                db.row_factory = sqlite3.Row
                found = db.execute(_qmarks(sql, len(args)), args).fetchall()
                return [dict(r) for r in found]
        assert self.admin_url is not None
        conn = await asyncpg.connect(self.admin_url)
        try:
            return [dict(r) for r in await conn.fetch(sql, *args)]
        finally:
            await conn.close()

    async def events(self, tenant_id: str, type: str) -> list[dict[str, Any]]:
        found = await self.rows("SELECT data FROM events WHERE tenant_id = $1 AND type = $2", tenant_id, type)
        return [json.loads(r["data"]) for r in found]


def _qmarks(sql: str, n: int) -> str:
    for i in range(n, 0, -1):
        sql = sql.replace(f"${i}", "?")
    return sql


async def new_tenant(database_url: str) -> tuple[str, str]:
    """A fresh tenant made beside a running server: its id and its operator token."""
    from tapgate.adapters.clock import SystemClock
    from tapgate.adapters.store.sql import open_sql_store
    from tapgate.services.accounts import create_tenant

    name = f"t-{secrets.token_hex(4)}"
    store = open_sql_store(database_url)
    try:
        return name, (await create_tenant(store, SystemClock(), name)).token
    finally:
        await store.close()
