"""The durable floor's writes: one transaction at invoke, one at the answer, each with a journal row,
through the raw driver (stdlib ``sqlite3`` on the event loop, WAL and ``synchronous=NORMAL`` as tapgate
runs SQLite; ``asyncpg`` from a pool, its statements prepared once per connection)."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Protocol

_TABLES = (
    "CREATE TABLE IF NOT EXISTS floor_invocations (id TEXT PRIMARY KEY, tool TEXT NOT NULL, "
    "arguments TEXT NOT NULL, status TEXT NOT NULL, message TEXT, created_at DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS floor_journal (seq {serial} PRIMARY KEY, subject TEXT NOT NULL, "
    "action TEXT NOT NULL, at DOUBLE PRECISION NOT NULL)",
)


class Durable(Protocol):
    async def open(self) -> None: ...

    async def invoked(self, invocation_id: str, tool: str, arguments: Any) -> None: ...

    async def answered(self, invocation_id: str, status: str, message: str | None) -> None: ...

    async def close(self) -> None: ...


class SqliteDurable:
    def __init__(self, path: str) -> None:
        self.path = path
        self.db: sqlite3.Connection | None = None

    async def open(self) -> None:
        self.db = db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        for statement in _TABLES:
            db.execute(statement.format(serial="INTEGER"))

    async def invoked(self, invocation_id: str, tool: str, arguments: Any) -> None:
        assert self.db is not None
        now = time.time()
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute(
            "INSERT INTO floor_invocations VALUES (?, ?, ?, 'pending', NULL, ?)",
            (invocation_id, tool, json.dumps(arguments), now),
        )
        self.db.execute(
            "INSERT INTO floor_journal (subject, action, at) VALUES (?, 'invoked', ?)", (invocation_id, now)
        )
        self.db.execute("COMMIT")

    async def answered(self, invocation_id: str, status: str, message: str | None) -> None:
        assert self.db is not None
        now = time.time()
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute(
            "UPDATE floor_invocations SET status = ?, message = ? WHERE id = ? AND status = 'pending'",
            (status, message, invocation_id),
        )
        self.db.execute(
            "INSERT INTO floor_journal (subject, action, at) VALUES (?, 'answered', ?)", (invocation_id, now)
        )
        self.db.execute("COMMIT")

    async def close(self) -> None:
        if self.db is not None:
            self.db.close()


class PostgresDurable:
    def __init__(self, url: str, pool_size: int = 10) -> None:
        self.url = url
        self.pool_size = pool_size
        self.pool: Any = None

    async def open(self) -> None:
        import asyncpg

        self.pool = await asyncpg.create_pool(self.url, min_size=1, max_size=self.pool_size)
        async with self.pool.acquire() as conn:
            for statement in _TABLES:
                await conn.execute(statement.format(serial="BIGSERIAL"))

    async def invoked(self, invocation_id: str, tool: str, arguments: Any) -> None:
        now = time.time()
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO floor_invocations VALUES ($1, $2, $3, 'pending', NULL, $4)",
                invocation_id,
                tool,
                json.dumps(arguments),
                now,
            )
            await conn.execute(
                "INSERT INTO floor_journal (subject, action, at) VALUES ($1, 'invoked', $2)",
                invocation_id,
                now,
            )

    async def answered(self, invocation_id: str, status: str, message: str | None) -> None:
        now = time.time()
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "UPDATE floor_invocations SET status = $1, message = $2 WHERE id = $3 AND status = 'pending'",
                status,
                message,
                invocation_id,
            )
            await conn.execute(
                "INSERT INTO floor_journal (subject, action, at) VALUES ($1, 'answered', $2)",
                invocation_id,
                now,
            )

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()


def open_durable(spec: str) -> Durable:
    """``sqlite:PATH`` or a ``postgresql://`` URL."""
    if spec.startswith("sqlite:"):
        return SqliteDurable(spec.removeprefix("sqlite:"))
    return PostgresDurable(spec)
