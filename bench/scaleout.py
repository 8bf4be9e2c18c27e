"""Scale-out rows: throughput with 1, 2 and 3 ``tapgate serve`` processes on one PostgreSQL,
with the wakes over LISTEN/NOTIFY and over NATS, and the CPU each side spends per invocation.

Every call crosses processes where there is more than one: the agents of a share of the pairs call on
gateway *i* while their devices link to gateway *i+1*, so each answer reaches its agent by a wake. The
bench also listens to the wakes themselves (a NATS subscription to ``tapgate.wake.>`` or a LISTEN on
``tapgate_wake``) to report the wake messages per invocation, the figure the capacity model in
docs/scaling.md multiplies out. On a two-core machine the CPU per invocation, not the throughput, is what
shows a serialization point: the servers share the cores.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

import psutil

from bench import seed
from bench.meter import Meter
from bench.rows import BY_NAME, Row, Spec
from bench.scenarios import _latency_detail, _window, db_counts, per_call
from bench.servers import Served, postgres_database, postgres_reachable, write_config
from bench.stage import Stage

WAKES = ("postgres", "nats")
COUNTS = (1, 2, 3)
NAMES = [f"scale-{wake}-{n}" for wake in WAKES for n in COUNTS]
NATS_URL = "nats://127.0.0.1:4222"


class _Options(Protocol):
    @property
    def postgres_admin(self) -> str | None: ...


class Bench(Protocol):
    """What the scale-out rows need of the run (``runner.Bench``): the runner calls this module, so this
    module names the run by what it uses rather than importing the runner back."""

    @property
    def options(self) -> _Options: ...

    @property
    def stage(self) -> Stage: ...

    @property
    def notes(self) -> list[str]: ...

    def say(self, line: str) -> None: ...

    def keep(self, row: Row) -> None: ...

    def skip(self, spec: Spec, reason: str) -> None: ...


def nats_processes() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["name"]) if p.info["name"] == "nats-server"]


async def nats_reachable(url: str) -> str | None:
    from tapgate.adapters.wake.nats_wake import check_reachable
    from tapgate.domain.errors import ConfigurationError

    try:
        await check_reachable(url)
    except ConfigurationError as e:
        return e.message + " Its rows are skipped."
    return None


@contextlib.asynccontextmanager
async def counting_wakes(wake: str, database_url: str) -> AsyncIterator[Callable[[], int]]:
    """Count the wake messages every gateway sends, as one more listener; yields the count so far."""
    heard = [0]

    def count(*_args: Any) -> None:
        heard[0] += 1

    if wake == "nats":
        from nats.aio.client import Client

        nc = Client()
        await nc.connect(NATS_URL)

        async def on_message(_msg: Any) -> None:
            heard[0] += 1

        await nc.subscribe("tapgate.wake.>", cb=on_message)
        try:
            yield lambda: heard[0]
        finally:
            await nc.close()
        return
    import asyncpg

    from tapgate.adapters.wake.postgres import CHANNEL

    conn = await asyncpg.connect(database_url)
    await conn.add_listener(CHANNEL, count)
    try:
        yield lambda: heard[0]
    finally:
        await conn.close()


async def measure(bench: Bench, want: set[str]) -> None:
    names = [n for n in NAMES if n in want]
    admin = bench.options.postgres_admin
    why = "SQLite only (--no-postgres)" if admin is None else await postgres_reachable(admin)
    if admin is None or why is not None:
        for name in names:
            bench.skip(BY_NAME[name], why or "skipped")
        return
    bench.stage.with_postgres = True
    try:
        async with postgres_database(admin) as url:
            tenant = await seed.new_tenant(url)
            pairs: list[seed.Pair] = []  # the same people for every row
            for wake in WAKES:
                chosen = [n for n in COUNTS if f"scale-{wake}-{n}" in want]
                if not chosen:
                    continue
                missing = await nats_reachable(NATS_URL) if wake == "nats" else None
                if missing is not None:
                    for n in chosen:
                        bench.skip(BY_NAME[f"scale-{wake}-{n}"], missing)
                    bench.notes.append(missing)
                    continue
                config = _config(bench.stage.work / f"scale-{wake}", url, wake)
                for n in chosen:
                    bench.say(f"tapgate on PostgreSQL, {n} gateway process(es), wake {wake}")
                    row = await _throughput(bench, f"scale-{wake}-{n}", config, url, wake, n, tenant, pairs)
                    bench.keep(row)
    finally:
        bench.stage.with_postgres = False


def _config(folder: Path, url: str, wake: str) -> Path:
    path = write_config(folder, url)
    extra = f'wake = "{wake}"\n' + (f'nats_url = "{NATS_URL}"\n' if wake == "nats" else "")
    path.write_text(path.read_text() + extra)
    return path


async def _throughput(
    bench: Bench,
    name: str,
    config: Path,
    url: str,
    wake: str,
    count: int,
    tenant: seed.Tenant,
    pairs: list[seed.Pair],
) -> Row:
    stage, sizes = bench.stage, bench.stage.sizes
    async with contextlib.AsyncExitStack() as stack:
        gateways = [
            await stack.enter_async_context(stage.serving(Served.tapgate(f"{name}-{i}", config, stage.logs)))
            for i in range(count)
        ]
        if not pairs:
            pairs.extend(await seed.tapgate_pairs(gateways[0].url, tenant, max(1, sizes.pairs)))
        jobs = [
            {
                "mode": "throughput",
                "url": gateways[i].url,
                "device_url": gateways[(i + 1) % count].url,
                "pairs": [p.as_json() for p in pairs[i::count]],
                "device": "ws",
            }
            for i in range(count)
        ]
        heard = await stack.enter_async_context(counting_wakes(wake, url))
        nats = Meter({"nats": nats_processes})
        async with stage.load(jobs, name) as started:
            for client in started:
                await client.expect("ready", 120)
            counted = await _db_counts(gateways)
            wakes_before, nats_before, t0 = heard(), nats.snapshot(), time.monotonic()
            warmup, seconds = sizes.throughput_warmup, sizes.throughput_seconds
            start, end, cpu, _ = await _window(stage, name, started, warmup, seconds)
            wakes_after, nats_after, t1 = heard(), nats.snapshot(), time.monotonic()
            results = [await c.expect("result", 120) for c in started]
            counted_after = await _db_counts(gateways)
    completed = sum(r["completed"] for r in results)
    errors: dict[str, int] = {}
    for r in results:
        for key, n in r["errors"].items():
            errors[key] = errors.get(key, 0) + n
    row = Row(BY_NAME[name], cpu=cpu)
    if not completed:
        row.skipped = f"no invocation completed: {errors}"
        return row
    rate = completed / (end - start)
    row.value = round(rate, 1)
    # The wakes and NATS's CPU are counted over the warm-up too (the load runs through it): estimates.
    span = (wakes_after - wakes_before) / max(1e-9, t1 - t0)
    row.detail = {
        "gateways": count,
        "wake": wake,
        "pairs": len(pairs),
        "completed": completed,
        "seconds": round(end - start, 2),
        "errors": errors,
        "under_load": _latency_detail([x for r in results for x in r["latencies"]]),
        "server_cpu_ms_per_invocation": round(cpu.get("server", 0.0) * 1000 / rate, 3),
        "postgres_cpu_ms_per_invocation": round(cpu.get("postgres", 0.0) * 1000 / rate, 3),
        "wake_messages_per_second": round(span, 1),
        "wake_messages_per_invocation": round(span / rate, 2),
        # every gateway's own counts, from ready to the end, over every call completed meanwhile
        "db_per_round_trip": per_call(
            counted, counted_after, sum(int(r.get("all_completed", r["completed"])) for r in results)
        ),
    }
    if wake == "nats":
        nats_cores = Meter.cores(nats_before, nats_after).get("nats", 0.0)
        row.detail["nats_cpu_ms_per_invocation"] = round(nats_cores * 1000 / rate, 3)
    return row


async def _db_counts(gateways: list[Served]) -> dict[str, float] | None:
    """The database work of every gateway together, as each counts it on ``/metrics``."""
    total: dict[str, float] = {}
    for gateway in gateways:
        counted = await db_counts(gateway)
        if counted is None:
            return None
        for key, value in counted.items():
            total[key] = total.get(key, 0.0) + value
    return total
