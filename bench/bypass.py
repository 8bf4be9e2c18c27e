"""What each bypass buys (``tapgate bench --bypass NAME``): tapgate served with every bypass and, beside
it, without each named one (``TAPGATE_BYPASS_OFF``), each on a fresh database of its own, all running at
once and measured in turns, the order of the servers turned each time; each figure is the median of its
turns, each ratio (without / with) the median of the turns' ratios. A bypass is worth keeping where it
moves a ratio by at least 5% in its favour, beyond the spread of its turns.

The rows: the round trips (WebSocket and long-poll device) and the throughput of fifty
pairs on each engine, and the memory of idle devices (WebSocket links and held long-polls). Beside each
figure, the server's CPU a call: on a machine busy with other work it moves less than the times do.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import scenarios, seed
from bench.rows import Row
from bench.runner import raise_file_limit
from bench.servers import (
    Served,
    postgres_database,
    postgres_reachable,
    sqlite_database,
    write_config,
)
from bench.stage import Sizes, Stage
from tapgate.bootstrap import BYPASS_OFF, BYPASSES

WITH = "with all"
# The bypasses that change what an idle link or a held long-poll keeps: the idle rows measure those only.
HOLDING = {"link", "ahead", "light_http", "light_ws"}


def names(asked: list[str]) -> list[str]:
    """The bypasses ``asked`` names (``all``: every one); raises ValueError for one tapgate lacks."""
    chosen = list(BYPASSES) if "all" in asked else list(dict.fromkeys(asked))
    unknown = [n for n in chosen if n not in BYPASSES]
    if unknown:
        raise ValueError(f"--bypass {', '.join(unknown)}: choose from all, {', '.join(BYPASSES)}.")
    return chosen


def _variants(chosen: list[str]) -> list[tuple[str, dict[str, str]]]:
    return [(WITH, {}), *((f"without {n}", {BYPASS_OFF: n}) for n in chosen)]


async def measure(
    stage: Stage, chosen: list[str], postgres_admin: str | None, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Every row for every variant: its figure, its turns, and its ratio to the server with all."""
    out: list[dict[str, Any]] = []
    engines = ["sqlite"]
    if postgres_admin is not None:
        why = await postgres_reachable(postgres_admin)
        if why is None:
            engines.append("postgres")
        else:
            say(why)
    for engine in engines:
        # On PostgreSQL the hot statements are part of the unit of work on asyncpg: not left out alone.
        on = [n for n in chosen if engine == "sqlite" or n != "raw_sql"]
        if on:
            out += await _calls(stage, engine, _variants(on), postgres_admin, say)
    holding = [n for n in chosen if n in HOLDING]
    if holding:
        out += await _idle(stage, _variants(holding), say)
    return out


@contextlib.asynccontextmanager
async def _database(stage: Stage, engine: str, label: str, admin: str | None) -> AsyncIterator[str]:
    if engine == "sqlite":
        yield await sqlite_database(stage.work / "bypass" / label.replace(" ", "-"))
        return
    assert admin is not None
    async with postgres_database(admin) as url:
        yield url


async def _calls(
    stage: Stage,
    engine: str,
    variants: list[tuple[str, dict[str, str]]],
    admin: str | None,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    sizes = stage.sizes
    kinds = {
        "roundtrip-ws": f"roundtrip-ws-{engine}",
        "roundtrip-lp": f"roundtrip-lp-{engine}",
        "throughput": f"throughput-{engine}" if engine == "sqlite" else "throughput-postgres-1",
    }
    say(f"tapgate on {engine}, with every bypass and without each of {len(variants) - 1}, side by side")
    measures: dict[tuple[str, str], Callable[[], Awaitable[Row]]] = {}
    async with contextlib.AsyncExitStack() as held:
        for label, env in variants:
            url = await held.enter_async_context(_database(stage, engine, label, admin))
            tenant = await seed.new_tenant(url)
            folder = stage.work / "bypass" / engine / label.replace(" ", "-")
            name = f"{engine}-{label.replace(' ', '-')}"
            served = Served.tapgate(name, write_config(folder, url), stage.logs, env=env)
            served = await held.enter_async_context(stage.serving(served))
            pairs = await seed.tapgate_pairs(served.url, tenant, max(1, sizes.pairs))
            for kind, row in kinds.items():
                measures[label, kind] = _measure(stage, kind, row, served, pairs)
        taken: dict[tuple[str, str], list[float | None]] = {key: [] for key in measures}
        cpu: dict[tuple[str, str], list[float | None]] = {key: [] for key in measures}
        labels = [label for label, _ in variants]
        for turn in range(sizes.turns):
            order = labels[turn % len(labels) :] + labels[: turn % len(labels)]
            for kind in kinds:
                for label in order:
                    measured = await measures[label, kind]()
                    taken[label, kind].append(measured.value)
                    server = measured.detail.get("cpu_ms_per_invocation", {}).get("server")
                    cpu[label, kind].append(server)
                    say(f"  turn {turn + 1}: {engine} {kind} {label}: {measured.value} ({server} ms CPU)")
    return [
        _figure(engine, kind, label, taken) | {"server_cpu_ms": _figure(engine, kind, label, cpu)}
        for kind in kinds
        for label in labels
    ]


def _measure(
    stage: Stage, kind: str, row: str, served: Served, pairs: list[seed.Pair]
) -> Callable[[], Awaitable[Row]]:
    if kind == "throughput":
        return lambda: scenarios.throughput(stage, row, served, pairs)
    return lambda: scenarios.roundtrip(stage, row, served, pairs[0], kind.removeprefix("roundtrip-"))


def _figure(
    engine: str, kind: str, label: str, taken: dict[tuple[str, str], list[float | None]]
) -> dict[str, Any]:
    """One variant's row: the median of its turns and of its turns' ratios to the server with all."""
    values, base = taken[label, kind], taken[WITH, kind]
    ratios = [v / b for v, b in zip(values, base, strict=True) if v is not None and b]
    measured = [v for v in values if v is not None]
    return {
        "engine": engine,
        "row": kind,
        "variant": label,
        "value": statistics.median(measured) if measured else None,
        "turns": values,
        "ratio": round(statistics.median(ratios), 3) if ratios else None,
        "ratio_turns": [round(r, 3) for r in ratios],
    }


async def _idle(
    stage: Stage, variants: list[tuple[str, dict[str, str]]], say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Idle devices on each variant in turn, one fresh server at a time over the same database: the
    server's memory (MiB) and what each connection adds (KiB)."""
    folder = stage.work / "bypass" / "idle"
    url = await sqlite_database(folder)
    tokens = await seed.bulk_devices(url, await seed.new_tenant(url), stage.sizes.idle_devices)
    config = write_config(folder, url)
    out: list[dict[str, Any]] = []
    for device in ("ws", "lp"):
        name = f"idle-{device}"
        base: Row | None = None
        for label, env in variants:
            say(f"{len(tokens):,} idle devices ({device}) {label}")
            served = Served.tapgate(f"{name}-{label.replace(' ', '-')}", config, stage.logs, env=env)
            async with stage.serving(served):
                row = await scenarios.idle(stage, name, served, tokens, device)
            base = base or row
            per, base_per = row.detail["per_connection_kib"], base.detail["per_connection_kib"]
            out.append(
                {
                    "engine": "sqlite",
                    "row": name,
                    "variant": label,
                    "value": row.value,
                    "per_connection_kib": per,
                    "ratio": round(row.value / base.value, 3) if row.value and base.value else None,
                    "per_connection_ratio": round(per / base_per, 3) if base_per else None,
                    "caveats": row.caveats,
                }
            )
    return out


async def _run(
    sizes: Sizes, chosen: list[str], postgres_admin: str | None, say: Callable[[str], None]
) -> Any:
    raise_file_limit()
    with tempfile.TemporaryDirectory(prefix="tapgate-bench-") as tmp:
        work = Path(tmp)
        stage = Stage(sizes, logs=work / "logs", work=work, profiles=None)
        try:
            return await measure(stage, chosen, postgres_admin, say)
        finally:
            for client in list(stage.clients):
                await client.close()
            for served in list(stage.servers):
                served.stop()


def run(sizes: Sizes, chosen: list[str], postgres_admin: str | None, say: Callable[[str], None]) -> Any:
    """``measure`` in a stage of its own, on uvloop as the bench's other rows."""
    import uvloop

    return uvloop.run(_run(sizes, chosen, postgres_admin, say))
