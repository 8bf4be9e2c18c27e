"""The servers the bench measures, each a real process on loopback: ``tapgate serve`` and the floor.

tapgate is started exactly as an operator starts it (``python -m tapgate serve --config … --workers N``),
so the bench measures whatever the gateway has become; its settings file is written here with limits
that let the bench's load through (long invocation timeouts, a high ingest cap, quiet logs). PostgreSQL
databases are made by tapgate's own migration and dropped afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from sqlalchemy.engine import make_url

READY_SECONDS = 60.0
STOP_SECONDS = 1.0

# Limits that keep the bench's own load from being refused; each is a documented tapgate setting.
BENCH_SETTINGS: dict[str, object] = {
    "device_channel_enabled": True,
    "device_sms_enabled": True,
    "invocation_timeout_seconds": 600,
    "device_call_timeout_seconds": 600,
    "ingest_daily_cap": 1_000_000,
    "max_devices_per_user": 1000,
    "max_open_confirmations": 1000,
    "approval_sign_ttl_seconds": 3600,
    "log_level": "warning",
    # the idle rows hold 10,000 links and still read the server's /metrics beside them
    "max_connections": 12_000,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def write_config(folder: Path, database_url: str) -> Path:
    """A tapgate.toml for the bench over ``database_url``."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {"database_url": database_url, **BENCH_SETTINGS}
    path = folder / "tapgate.toml"
    path.write_text("".join(f"{key} = {_toml(value)}\n" for key, value in values.items()))
    return path


@dataclass
class Served:
    """One server process (and, with workers, its children) on a free loopback port."""

    name: str
    argv: list[str]
    logs: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    workers: int = 1
    env: dict[str, str] = field(default_factory=dict)  # added to the process's environment

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def tapgate(
        cls, name: str, config: Path, logs: Path, workers: int = 1, env: dict[str, str] | None = None
    ) -> Served:
        port = free_port()
        argv = ["-m", "tapgate", "serve", "--config", str(config), "--port", str(port)]
        return cls(name, [*argv, "--workers", str(workers)], logs, port, workers=workers, env=env or {})

    @classmethod
    def floor(cls, logs: Path, durable: str | None = None, name: str = "floor") -> Served:
        """The in-memory floor, or with ``durable`` (``sqlite:PATH`` or a PostgreSQL URL) a durable one."""
        port = free_port()
        argv = ["-m", "bench.floor", "--port", str(port)]
        return cls(name, [*argv, "--durable", durable] if durable else argv, logs, port)

    async def start(self) -> Served:
        """Start the process and wait until ``/readyz`` answers 200; raises RuntimeError if it exits."""
        log, process = self._spawn()
        deadline = time.monotonic() + READY_SECONDS
        async with httpx.AsyncClient(base_url=self.url, timeout=2) as client:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"{self.name} exited at start: {log.read_text()[-2000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/readyz")).status_code == 200:
                        return self
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self.name} did not become ready in {READY_SECONDS:.0f} s")
                await asyncio.sleep(0.05)

    def _spawn(self) -> tuple[Path, subprocess.Popen[bytes]]:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{self.name}-{self.port}.log"
        with log.open("wb") as out:
            self.process = process = subprocess.Popen(
                [sys.executable, *self.argv],
                stdout=subprocess.DEVNULL,
                stderr=out,
                env=os.environ | {"PYTHONUNBUFFERED": "1"} | self.env,
            )
        return log, process

    def processes(self) -> list[psutil.Process]:
        """The server's processes: the one started and its children (uvicorn's workers)."""
        if self.process is None:
            return []
        try:
            main = psutil.Process(self.process.pid)
            return [main, *main.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to the process and its workers: a long-poll whose client left holds
        uvicorn's graceful shutdown for its whole wait, and nothing is measured after the load stops."""
        if self.process is None:
            return
        family = self.processes()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        for child in family[1:]:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        self.process = None


@contextlib.asynccontextmanager
async def running(served: Served) -> AsyncIterator[Served]:
    await served.start()
    try:
        yield served
    finally:
        served.stop()


async def postgres_reachable(admin_url: str) -> str | None:
    """None when ``admin_url`` answers, else why not (one sentence)."""
    import asyncpg

    try:
        conn = await asyncpg.connect(admin_url, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError) as e:
        return f"PostgreSQL is not reachable at {admin_url} ({type(e).__name__}); its rows are skipped"
    await conn.close()
    return None


@contextlib.asynccontextmanager
async def postgres_database(admin_url: str) -> AsyncIterator[str]:
    """A fresh database and app role migrated by tapgate; yields the app's URL, drops both after."""
    import asyncpg

    from tapgate.adapters.store.migrate import migrate

    suffix = secrets.token_hex(4)
    name, role = f"tapgate_bench_{suffix}", f"tapgate_bench_app_{suffix}"
    app_url = make_url(admin_url).set(username=role, password=None, database=name).render_as_string(False)
    try:
        await migrate(app_url, admin_url)
        yield app_url
    finally:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            await conn.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await conn.close()


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def sqlite_database(folder: Path) -> str:
    """A fresh SQLite database in ``folder``, migrated by tapgate; its URL."""
    from tapgate.adapters.store.migrate import migrate

    url = f"sqlite:///{_made(folder) / 'tapgate.db'}"
    await migrate(url)
    return url


@contextlib.asynccontextmanager
async def plain_postgres_database(admin_url: str) -> AsyncIterator[str]:
    """A fresh empty database for the durable floor, owned by the admin; yields its URL, drops it after."""
    import asyncpg

    name = f"tapgate_floor_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    try:
        yield make_url(admin_url).set(database=name).render_as_string(False)
    finally:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await conn.close()
