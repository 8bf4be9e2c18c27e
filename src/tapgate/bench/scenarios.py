"""How each row is measured: the servers it needs, the load clients it starts, and what it reads off.

Each measurement starts its load in separate client processes (``tapgate.bench.client``), waits until
they are connected, opens a timed window that every process knows (``time.monotonic()`` is shared by the
machine), and meters the CPU of the servers, the clients and PostgreSQL over that window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tapgate.bench import profile
from tapgate.bench.meter import Meter, postgres_processes, rss_bytes
from tapgate.bench.rows import BY_NAME, Row
from tapgate.bench.seed import Pair
from tapgate.bench.servers import Served

MIB = 1024 * 1024
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
    hold_seconds: float  # then holding them: memory sampled thrice, the server's CPU metered
    shared_sqlite: bool = False  # one SQLite server for every SQLite row (the smoke run's speed)


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
    hold_seconds=3,
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
    """One ``tapgate.bench.client`` process: a job in, event lines out."""

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
                "tapgate.bench.client",
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

    def meter(self) -> Meter:
        groups: dict[str, Any] = {
            "server": lambda: [p for s in self.servers for p in s.processes()],
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
            if served.process is not None:
                folded = self.profiles / f"profile-{name}-{served.name}.folded"
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


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ascending values, by nearest rank."""
    if not sorted_values:
        return float("nan")
    rank = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


def _latency_detail(latencies: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies)
    if not ms:
        return {}
    return {
        "p50_ms": round(percentile(ms, 0.5), 3),
        "p90_ms": round(percentile(ms, 0.9), 3),
        "p99_ms": round(percentile(ms, 0.99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "min_ms": round(ms[0], 3),
        "max_ms": round(ms[-1], 3),
    }


def _split(items: Sequence[Any], parts: int) -> list[list[Any]]:
    parts = max(1, min(parts, len(items)))
    return [list(items[i::parts]) for i in range(parts)]


async def _window(
    stage: Stage, name: str, clients: list[ClientProcess], warmup: float, seconds: float
) -> tuple[float, float, dict[str, float]]:
    """Open the same timed window on every client; the cores each side used inside it."""
    meter = stage.meter()
    start = time.monotonic() + warmup
    end = start + seconds
    for client in clients:
        await client.send(json.dumps({"start": start, "end": end}))
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    async with stage.profiled(name, seconds):
        before = meter.snapshot()
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        after = meter.snapshot()
    return start, end, Meter.cores(before, after)


async def roundtrip(stage: Stage, name: str, served: Served, pair: Pair, device: str) -> Row:
    """One agent and one device, one invocation at a time: p50 and p99 of the complete round trip."""
    sizes = stage.sizes
    job = {
        "mode": "roundtrip",
        "url": served.url,
        "pairs": [pair.as_json()],
        "device": device,
        "warmup": sizes.roundtrip_warmup,
        "count": sizes.roundtrip_count,
    }
    async with stage.load([job], name) as [client]:
        await client.expect("ready", 60)
        meter = stage.meter()
        before = meter.snapshot()
        # Warm-up takes at most a quarter of the measuring time, measuring at most all of it.
        warm_until = time.monotonic() + sizes.roundtrip_seconds / 4
        end = warm_until + sizes.roundtrip_seconds
        await client.send(json.dumps({"start": warm_until, "end": end}))
        async with stage.profiled(name, sizes.roundtrip_seconds):
            result = await client.expect("result", end - time.monotonic() + 120)
        cpu = Meter.cores(before, meter.snapshot())
    latencies = result["latencies"]
    detail: dict[str, Any] = _latency_detail(latencies) | {
        "count": len(latencies),
        "seconds": round(result["seconds"], 2),
        "errors": result["errors"],
    }
    row = Row(BY_NAME[name], cpu=cpu, detail=detail)
    if latencies:
        row.value, row.p99 = detail["p50_ms"], detail["p99_ms"]
    else:
        row.skipped = f"no round trip completed: {result['errors']}"
    return row


async def throughput(stage: Stage, name: str, served: Served, pairs: list[Pair], clients: int = 1) -> Row:
    """Many pairs at once for a timed window: complete invocations per second."""
    sizes = stage.sizes
    jobs = [
        {"mode": "throughput", "url": served.url, "pairs": [p.as_json() for p in part], "device": "ws"}
        for part in _split(pairs, clients)
    ]
    async with stage.load(jobs, name) as started:
        for client in started:
            await client.expect("ready", 120)
        start, end, cpu = await _window(
            stage, name, started, sizes.throughput_warmup, sizes.throughput_seconds
        )
        results = [await c.expect("result", 120) for c in started]
    completed = sum(r["completed"] for r in results)
    latencies = [x for r in results for x in r["latencies"]]
    errors: dict[str, int] = {}
    for r in results:
        for key, n in r["errors"].items():
            errors[key] = errors.get(key, 0) + n
    detail: dict[str, Any] = {
        "pairs": len(pairs),
        "client_processes": len(jobs),
        "completed": completed,
        "seconds": round(end - start, 2),
        "errors": errors,
        "under_load": _latency_detail(latencies),
    }
    row = Row(BY_NAME[name], cpu=cpu, detail=detail)
    if completed:
        row.value = round(completed / (end - start), 1)
    else:
        row.skipped = f"no invocation completed: {errors}"
    return row


def _established(served: Served) -> int:
    count = 0
    for process in served.processes():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            count += sum(
                1
                for c in process.net_connections(kind="tcp")
                if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == served.port
            )
    return count


async def _settle(served: Served, until: float, step: float) -> bool:
    """Wait until the server's CPU stays under a tenth of a core for ``step`` seconds, or until ``until``
    (``time.monotonic()``); whether it settled."""
    meter = Meter({"server": served.processes})
    while time.monotonic() < until:
        before = meter.snapshot()
        await asyncio.sleep(step)
        if Meter.cores(before, meter.snapshot()).get("server", 0.0) < 0.1:
            return True
    return False


async def _ws_links(served: Served) -> int | None:
    """Open device links as the gateway's own metrics count them, if it exposes ``tapgate_ws_links``."""
    import httpx

    with contextlib.suppress(httpx.HTTPError, ValueError):
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            for line in (await client.get("/metrics")).text.splitlines():
                if line.startswith("tapgate_ws_links "):
                    return int(float(line.split()[1]))
    return None


async def idle(stage: Stage, name: str, served: Served, tokens: list[str], device: str) -> Row:
    """Every device connected and left idle: the server's resident memory, what each connection adds, and
    the CPU the server spends holding them. Connecting and settling share ``idle_seconds``; a server still
    busy with the connections at the end is measured as it is, and the row says so."""
    sizes = stage.sizes
    baseline = rss_bytes(served.processes())
    started_at = time.monotonic()
    budget_end = started_at + sizes.idle_seconds
    jobs = [
        {
            "mode": "idle",
            "url": served.url,
            "device": device,
            "device_tokens": part,
            "concurrency": 64,
            "connect_seconds": sizes.idle_seconds * 0.75,
        }
        for part in _split(tokens, sizes.idle_clients)
    ]
    meter = stage.meter()
    async with stage.load(jobs, name) as started:
        before = meter.snapshot()
        ready = [await c.expect("ready", sizes.idle_seconds + 60) for c in started]
        connect_cpu = Meter.cores(before, meter.snapshot())
        settled = await _settle(served, budget_end, min(1.0, sizes.idle_seconds / 5))
        settle_seconds = time.monotonic() - started_at
        held = _established(served)
        links = await _ws_links(served) if device == "ws" else None
        before = meter.snapshot()
        samples = []
        async with stage.profiled(name, sizes.hold_seconds):
            for _ in range(3):
                samples.append(rss_bytes(served.processes()))
                await asyncio.sleep(sizes.hold_seconds / 3)
        hold_cpu = Meter.cores(before, meter.snapshot())
        for client in started:
            await client.send("stop")
        results = [await c.expect("result", 120) for c in started]
    rss = max(samples)
    connected = sum(r["connected"] for r in results)
    detail: dict[str, Any] = {
        "devices": len(tokens),
        "connected": connected,
        "server_established": held,
        "server_links": links,
        "dropped_while_held": sum(r["dropped_while_held"] for r in results),
        "client_processes": len(jobs),
        "connect_seconds": round(max(r["seconds"] for r in ready), 2),
        "settled": settled,
        "settle_seconds": round(settle_seconds, 2),
        "baseline_mib": round(baseline / MIB, 1),
        "per_connection_kib": round((rss - baseline) / max(1, connected) / 1024, 1),
        "connect_cpu_cores": connect_cpu,
        "errors": {k: v for r in results for k, v in r["errors"].items()},
    }
    row = Row(BY_NAME[name], value=round(rss / MIB, 1), cpu=hold_cpu, detail=detail)
    if connected < len(tokens):
        row.caveats.append(f"only {connected:,} of {len(tokens):,} devices connected in time")
    if not settled:
        row.caveats.append(
            f"the server was still busy with the connections after {sizes.idle_seconds:.0f} s "
            f"({hold_cpu.get('server', 0):.2f} cores while holding them): measured as it was"
        )
    return row


async def ingest(stage: Stage, served: Served, tokens: list[str]) -> Row:
    """Distinct messages from many devices with every fifth a replay: answered messages per second."""
    sizes = stage.sizes
    job = {
        "mode": "ingest",
        "url": served.url,
        "device_tokens": tokens,
        "concurrency": sizes.ingest_concurrency,
        "replay_every": 5,
    }
    async with stage.load([job], "ingest") as [client]:
        await client.expect("ready", 60)
        start, end, cpu = await _window(stage, "ingest", [client], sizes.ingest_warmup, sizes.ingest_seconds)
        result = await client.expect("result", 120)
    outcomes: dict[str, int] = result["outcomes"]
    answered = outcomes.get("stored", 0) + outcomes.get("duplicate", 0)
    detail = {"devices": len(tokens), "concurrency": sizes.ingest_concurrency, "outcomes": outcomes}
    row = Row(BY_NAME["ingest"], cpu=cpu, detail=detail)
    if answered:
        row.value = round(answered / (end - start), 1)
    else:
        row.skipped = f"no message was stored: {outcomes}"
    return row


async def decide(stage: Stage, served: Served, decisions: list[list[str]], setup_seconds: float) -> Row:
    """Every prepared signed decision posted, ``decide_concurrency`` at a time: decisions per second."""
    sizes = stage.sizes
    job = {
        "mode": "decide",
        "url": served.url,
        "decisions": decisions,
        "concurrency": sizes.decide_concurrency,
    }
    async with stage.load([job], "approvals") as [client]:
        await client.expect("ready", 60)
        meter = stage.meter()
        before = meter.snapshot()
        now = time.monotonic()
        await client.send(json.dumps({"start": now, "end": now + sizes.decide_seconds}))
        async with stage.profiled("approvals-http", sizes.decide_seconds):
            result = await client.expect("result", 200)
        cpu = Meter.cores(before, meter.snapshot())
    outcomes: dict[str, int] = result["outcomes"]
    detail = {
        "approvals": len(decisions),
        "concurrency": sizes.decide_concurrency,
        "outcomes": outcomes,
        "seconds": round(result["seconds"], 3),
        "setup_seconds": round(setup_seconds, 1),
    }
    row = Row(BY_NAME["approvals-http"], cpu=cpu, detail=detail)
    decided = outcomes.get("decided", 0)
    if decided:
        row.value = round(decided / result["seconds"], 1)
    else:
        row.skipped = f"no decision was accepted: {outcomes}"
    return row


@dataclass
class _Rate:
    """Calls of one step and the CPU this thread spent on them: calls per CPU second does not depend on
    what else the machine runs, where calls per wall second would."""

    calls: int = 0
    cpu: float = 0.0
    wall: float = 0.0

    def run(self, step: Callable[[], object], seconds: float) -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        deadline = wall + seconds
        while True:
            for _ in range(20):
                step()
            self.calls += 20
            if time.perf_counter() > deadline or self.calls >= 1_000_000:
                break
        self.cpu += time.thread_time() - cpu
        self.wall += time.perf_counter() - wall

    @property
    def per_cpu_second(self) -> float:
        return self.calls / self.cpu if self.cpu else 0.0

    @property
    def per_wall_second(self) -> float:
        return self.calls / self.wall if self.wall else 0.0


def verification(seconds: float) -> tuple[Row, Row]:
    """In this process, in interleaved turns: ``cryptography``'s raw P-256 verify, and a decision verified
    the way tapgate verifies one (the signed text built from the approval, then ``verify_decision`` with
    the device's stored key as text), over the same key and signature; each per CPU second."""
    import base64

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    from tapgate.domain.approvals import sign_decision, signed_text, verify_decision
    from tapgate.domain.keys import KeyAlgorithm, canonical_public_key, load_public_key

    key = ec.generate_private_key(ec.SECP256R1())
    fields = (
        "tapgate-approval-v1",
        "apr_" + "0" * 32,
        "approved",
        "unlock_door",
        "door",
        "a" * 64,
        "b" * 32,
        2_000_000_000,
    )
    text = signed_text(*fields)
    signature = sign_decision(key, text)
    payload, der = text.encode(), base64.b64decode(signature)
    public, algorithm = key.public_key(), ec.ECDSA(hashes.SHA256())
    spki = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    stored = canonical_public_key(load_public_key(KeyAlgorithm.P256, base64.b64encode(spki).decode()))
    edkey = ed25519.Ed25519PrivateKey.generate()
    edsig, edpublic = edkey.sign(payload), edkey.public_key()
    raw, decided, ed = _Rate(), _Rate(), _Rate()
    rounds = 10  # interleaved, so that the three share whatever else the machine is doing
    for _ in range(rounds):
        raw.run(lambda: public.verify(der, payload, algorithm), seconds / rounds)
        decided.run(
            lambda: verify_decision("p256", stored, signed_text(*fields), signature), seconds / rounds
        )
        ed.run(lambda: edpublic.verify(edsig, payload), seconds / rounds)
    raw_row = Row(
        BY_NAME["verify-raw"],
        value=round(raw.per_cpu_second, 1),
        detail={
            "per": "CPU second of the measuring thread",
            "per_wall_second": round(raw.per_wall_second, 1),
            "ed25519_raw_per_cpu_second": round(ed.per_cpu_second, 1),
            "seconds": seconds,
        },
    )
    decision_row = Row(
        BY_NAME["approvals"],
        value=round(decided.per_cpu_second, 1),
        detail={
            "per": "CPU second of the measuring thread",
            "per_wall_second": round(decided.per_wall_second, 1),
            "path": "signed_text + verify_decision(alg, stored key text, text, base64 DER)",
            "seconds": seconds,
        },
    )
    return raw_row, decision_row
