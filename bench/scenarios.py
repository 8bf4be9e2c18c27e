"""How each row is measured: the servers it needs, the load clients it starts, and what it reads off.

Each measurement starts its load in separate client processes (``bench.client``), waits until
they are connected, opens a timed window that every process knows (``time.monotonic()`` is shared by the
machine), and meters the CPU of the servers, the clients and PostgreSQL over that window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

import psutil

from bench import profile
from bench.client import UNCOVERED
from bench.meter import Meter, rss_bytes
from bench.rows import BY_NAME, Row
from bench.seed import Pair
from bench.servers import Served
from bench.stage import ClientProcess, Stage

MIB = 1024 * 1024


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
    stage: Stage,
    name: str,
    clients: list[ClientProcess],
    warmup: float,
    seconds: float,
    served: Served | None = None,
) -> tuple[float, float, dict[str, float], dict[str, float]]:
    """Open the same timed window on every client; the cores each side used inside it, and (given the
    server) the database work it counted inside it."""
    meter = stage.meter(served)
    start = time.monotonic() + warmup
    end = start + seconds
    for client in clients:
        await client.send(json.dumps({"start": start, "end": end}))
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    async with stage.profiled(name, seconds):
        counted = await db_counts(served) if served is not None else None
        before = meter.snapshot()
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        after = meter.snapshot()
        counted_after = await db_counts(served) if served is not None else None
    return start, end, Meter.cores(before, after), per_call(counted, counted_after, 1)


_DB_METRICS = {
    "tapgate_db_transactions_total": "transactions",
    "tapgate_db_writing_transactions_total": "writing",
    "tapgate_db_statements_total": "statements",
}


async def db_counts(served: Served) -> dict[str, float] | None:
    """The server's own counts of database transactions, writing ones and statements (``/metrics``);
    None from a server that keeps none (the floors)."""
    import httpx

    found: dict[str, float] = {}
    with contextlib.suppress(httpx.HTTPError, ValueError):
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            response = await client.get("/metrics")
            if response.status_code != 200:
                return None
            for line in response.text.splitlines():
                metric, _, value = line.partition(" ")
                if metric in _DB_METRICS:
                    found[_DB_METRICS[metric]] = float(value)
    return found if len(found) == len(_DB_METRICS) else None


def cpu_per_call(cpu: dict[str, float], seconds_per_call: float) -> dict[str, float]:
    """The server's and PostgreSQL's CPU a call (ms), from the cores each used over a window of calls."""
    return {g: round(cpu[g] * seconds_per_call * 1000, 3) for g in ("server", "postgres") if g in cpu}


def _profile_of(stage: Stage, name: str, served: Served) -> dict[str, Any]:
    """The row's profile summary (with --profile), for a target it falls short of to point at, and each
    part's share of the server's samples (``profile.parts``)."""
    folded = stage.profile_path(name, served)
    if folded is None:
        return {}
    shares = profile.parts(folded) if folded.exists() else {}
    return {"profile": folded.with_suffix(".txt").name} | ({"parts": shares} if shares else {})


def per_call(before: dict[str, float] | None, after: dict[str, float] | None, calls: int) -> dict[str, float]:
    """What the database did per call between two ``db_counts``; {} without counts or calls."""
    if before is None or after is None or calls <= 0:
        return {}
    return {key: round((after[key] - before[key]) / calls, 2) for key in _DB_METRICS.values()}


async def roundtrip(
    stage: Stage, name: str, served: Served, pair: Pair, device: str, covered: bool = False
) -> Row:
    """One agent and one device, one invocation at a time: p50 and p99 of the complete round trip.
    ``covered``: every call must go through a standing mandate (its view carries ``mandate_id``); a call
    that did not is not timed, and the row is not reported."""
    sizes = stage.sizes
    job = {
        "mode": "roundtrip",
        "url": served.url,
        "pairs": [pair.as_json()],
        "device": device,
        "warmup": sizes.roundtrip_warmup,
        "count": sizes.roundtrip_count,
        "covered": covered,
    }
    async with stage.load([job], name) as [client]:
        await client.expect("ready", 60)
        counted = await db_counts(served)
        meter = stage.meter(served)
        before = meter.snapshot()
        # Warm-up takes at most a quarter of the measuring time, measuring at most all of it.
        warm_until = time.monotonic() + sizes.roundtrip_seconds / 4
        end = warm_until + sizes.roundtrip_seconds
        await client.send(json.dumps({"start": warm_until, "end": end}))
        async with stage.profiled(name, sizes.roundtrip_seconds):
            result = await client.expect("result", end - time.monotonic() + 120)
        after = meter.snapshot()
        cpu = Meter.cores(before, after)
    latencies = result["latencies"]
    calls = len(latencies) + int(result.get("warmed", 0))
    detail: dict[str, Any] = _latency_detail(latencies) | {
        "count": len(latencies),
        "seconds": round(result["seconds"], 2),
        "errors": result["errors"],
        # counted by the server over the warm-up and the measured calls (a link's own start and end
        # are inside the window too: a few transactions over thousands of calls)
        "db_per_round_trip": per_call(counted, await db_counts(served), calls),
        # one call at a time: the cores over the window are the CPU of its calls, warm-up included
        "cpu_ms_per_invocation": cpu_per_call(cpu, (after.wall - before.wall) / max(calls, 1)),
        **_profile_of(stage, name, served),
    }
    row = Row(BY_NAME[name], cpu=cpu, detail=detail)
    uncovered = result["errors"].get(UNCOVERED, 0)
    if covered and uncovered:
        row.skipped = f"{uncovered} of its calls went through without a mandate: {result['errors']}"
    elif latencies:
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
        counted = await db_counts(served)
        start, end, cpu, _ = await _window(
            stage, name, started, sizes.throughput_warmup, sizes.throughput_seconds
        )
        results = [await c.expect("result", 120) for c in started]
        counted_after = await db_counts(served)
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
    if served.workers == 1:  # /metrics answers for one worker only
        # From ready to the end, over every call completed meanwhile (warm-up included): both ends are
        # quiet, so a slow /metrics answer on a busy machine moves nothing. The links' own start (a hold
        # and a first presence each) is inside and spread over the calls.
        everything = sum(int(r.get("all_completed", r["completed"])) for r in results)
        detail["db_per_round_trip"] = per_call(counted, counted_after, everything)
    row = Row(BY_NAME[name], cpu=cpu, detail=detail)
    if completed:
        row.value = round(completed / (end - start), 1)
        if "server" in cpu:
            detail["server_cpu_ms_per_invocation"] = round(cpu["server"] * 1000 / row.value, 3)
        detail["cpu_ms_per_invocation"] = cpu_per_call(cpu, 1 / row.value)
        detail |= _profile_of(stage, name, served)
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
        counted, counted_at = await db_counts(served), time.monotonic()
        samples = []
        async with stage.profiled(name, sizes.hold_seconds):
            for _ in range(3):
                samples.append(rss_bytes(served.processes()))
                await asyncio.sleep(sizes.hold_seconds / 3)
        hold_cpu = Meter.cores(before, meter.snapshot())
        idle_db = per_call(counted, await db_counts(served), 1)
        held_for = time.monotonic() - counted_at
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
        "db_per_second_held": {k: round(v / held_for, 2) for k, v in idle_db.items()},
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
        start, end, cpu, database = await _window(
            stage, "ingest", [client], sizes.ingest_warmup, sizes.ingest_seconds, served
        )
        result = await client.expect("result", 120)
    outcomes: dict[str, int] = result["outcomes"]
    answered = outcomes.get("stored", 0) + outcomes.get("duplicate", 0)
    detail: dict[str, Any] = {
        "devices": len(tokens),
        "concurrency": sizes.ingest_concurrency,
        "outcomes": outcomes,
    }
    row = Row(BY_NAME["ingest"], cpu=cpu, detail=detail)
    if answered:
        row.value = round(answered / (end - start), 1)
        if database:
            detail["db_per_message"] = {k: round(v / answered, 2) for k, v in database.items()}
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
