"""The stage every measurement shares: how much each does (``Sizes``), the servers running, and the load
clients, each a ``bench.client`` process that takes a job line and answers event lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench import profile
from bench.meter import Meter, postgres_processes
from bench.servers import Served

STREAM_LIMIT = 1 << 26  # job and result lines carry token and latency lists


@dataclass(frozen=True)
class Sizes:
    """How much each measurement does; every loop is bounded by these counts and times."""

    roundtrip_warmup: int
    roundtrip_count: int
    roundtrip_seconds: float
    pairs: int
    throughput_warmup: float
    throughput_seconds: float
    idle_devices: int
    idle_clients: int
    ingest_devices: int
    ingest_concurrency: int
    ingest_warmup: float
    ingest_seconds: float
    approvals: int
    decide_concurrency: int
    decide_seconds: float
    verify_seconds: float
    idle_seconds: float  # connecting and settling, per kind of connection
    hold_seconds: float  # then holding them: memory sampled thrice, the server's CPU and database metered
    shared_sqlite: bool = False  # one SQLite server for every SQLite row (the smoke run's speed)
    turns: int = 1  # each durable floor and the rows judged against it, measured in this many turns


FULL = Sizes(
    roundtrip_warmup=100,
    roundtrip_count=2000,
    roundtrip_seconds=6,
    pairs=50,
    throughput_warmup=1.5,
    throughput_seconds=6,
    idle_devices=10_000,
    idle_clients=2,
    ingest_devices=100,
    ingest_concurrency=32,
    ingest_warmup=1,
    ingest_seconds=5,
    approvals=400,
    decide_concurrency=16,
    decide_seconds=6,
    verify_seconds=1.0,
    idle_seconds=40,
    hold_seconds=26,  # past one renewal of every held link (each 25 s): the database's idle rate is whole
    turns=3,
)
QUICK = Sizes(
    roundtrip_warmup=20,
    roundtrip_count=200,
    roundtrip_seconds=3,
    pairs=50,
    throughput_warmup=1,
    throughput_seconds=3,
    idle_devices=2000,
    idle_clients=1,
    ingest_devices=50,
    ingest_concurrency=32,
    ingest_warmup=0.5,
    ingest_seconds=2,
    approvals=300,
    decide_concurrency=16,
    decide_seconds=3,
    verify_seconds=0.5,
    idle_seconds=20,
    hold_seconds=3,
)
SMOKE = Sizes(
    roundtrip_warmup=2,
    roundtrip_count=5,
    roundtrip_seconds=2,
    pairs=3,
    throughput_warmup=0.2,
    throughput_seconds=0.5,
    idle_devices=20,
    idle_clients=1,
    ingest_devices=4,
    ingest_concurrency=2,
    ingest_warmup=0.1,
    ingest_seconds=0.4,
    approvals=5,
    decide_concurrency=2,
    decide_seconds=2,
    verify_seconds=0.1,
    idle_seconds=5,
    hold_seconds=0.6,
    shared_sqlite=True,
)


class ClientProcess:
    """One ``bench.client`` process: a job in, event lines out."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log

    @classmethod
    async def start(cls, job: dict[str, Any], logs: Path, name: str) -> ClientProcess:
        log = _log_file(logs, f"client-{name}.log")
        with log.open("wb") as err:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.client",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                limit=STREAM_LIMIT,
            )
        client = cls(process, log)
        await client.send(json.dumps(job))
        return client

    @property
    def pid(self) -> int:
        return self.process.pid

    async def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()

    async def expect(self, event: str, within: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        async with asyncio.timeout(within):
            while True:
                line = await self.process.stdout.readline()
                if not line:
                    await self.process.wait()
                    raise RuntimeError(f"the load client exited ({self.process.returncode}): {self._tail()}")
                data: dict[str, Any] = json.loads(line)
                if data.get("event") == event:
                    return data

    def _tail(self) -> str:
        return self.log.read_text()[-1500:] if self.log.exists() else ""

    async def close(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()


@dataclass
class Stage:
    """The run's shared parts: sizes, folders, the meter's process groups."""

    sizes: Sizes
    logs: Path
    work: Path
    servers: list[Served] = field(default_factory=list)
    clients: list[ClientProcess] = field(default_factory=list)
    with_postgres: bool = False
    profiles: Path | None = None  # where py-spy's samples of each timed window go (--profile)
    turn: int | None = None  # the turn being measured, in a run of several (it names the profiles)

    def profile_path(self, name: str, served: Served) -> Path | None:
        """Where the samples of ``served`` in row ``name``'s window go: one file a turn, so a row measured
        in turns keeps the profile of the turn it keeps (None without --profile)."""
        if self.profiles is None:
            return None
        turn = f"-turn{self.turn}" if self.turn is not None else ""
        return self.profiles / f"profile-{name}-{served.name}{turn}.folded"

    def meter(self, served: Served | None = None) -> Meter:
        """What the servers (only ``served``, if given: the others are "other"), the load clients and
        PostgreSQL use."""
        servers = [served] if served is not None else self.servers
        groups: dict[str, Any] = {
            "server": lambda: [p for s in servers for p in s.processes()],
            "client": lambda: [_process(c.pid) for c in self.clients if c.process.returncode is None],
        }
        if self.with_postgres:
            groups["postgres"] = postgres_processes
        return Meter(groups)

    @contextlib.asynccontextmanager
    async def serving(self, served: Served) -> AsyncIterator[Served]:
        await served.start()
        self.servers.append(served)
        try:
            yield served
        finally:
            self.servers.remove(served)
            served.stop()

    @contextlib.asynccontextmanager
    async def profiled(self, name: str, seconds: float) -> AsyncIterator[None]:
        """With --profile, sample every running server with py-spy for ``seconds`` from now."""
        if self.profiles is None:
            yield
            return
        recorders = []
        for served in self.servers:
            folded = self.profile_path(name, served)
            if served.process is not None and folded is not None:
                recorder = await profile.record(served.process.pid, seconds, folded)
                if recorder is not None:
                    recorders.append((recorder, folded))
        try:
            yield
        finally:
            for recorder, folded in recorders:
                try:
                    async with asyncio.timeout(seconds + 30):
                        await recorder.wait()
                except TimeoutError:
                    recorder.kill()
                    await recorder.wait()
                if folded.exists():
                    folded.with_suffix(".txt").write_text(profile.summarize(folded))

    @contextlib.asynccontextmanager
    async def load(self, jobs: Sequence[dict[str, Any]], name: str) -> AsyncIterator[list[ClientProcess]]:
        started: list[ClientProcess] = []
        try:
            for n, job in enumerate(jobs):
                started.append(await ClientProcess.start(job, self.logs, f"{name}-{n}"))
            self.clients.extend(started)
            yield started
        finally:
            for client in started:
                with contextlib.suppress(ValueError):
                    self.clients.remove(client)
                await client.close()


def _log_file(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def _process(pid: int) -> psutil.Process:
    return psutil.Process(pid)
