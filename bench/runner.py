"""``make bench``: start the servers each row needs, measure, judge each row against its target, report.

Rows are measured in groups that share a server, in this order: the raw verify rate (no server), the
floor, the durable floor on sqlite3 beside tapgate on SQLite, the durable floor on asyncpg beside tapgate
on PostgreSQL with one worker (then two workers alone), ingest, approvals, the chain head, the idle devices
(a fresh server per connection kind, so RSS counts nothing else) and scale-out.

A durable floor and the rows judged against it run at once and are measured in alternating turns (three
in a full run, ``--turns``): each turn takes the floor's WebSocket round trip, then tapgate's, then the
long-poll pair, then the throughput pair, and each row keeps its median turn. On a shared machine a burst
of other work then lands on one turn of one row, not on a floor and so on every ratio judged against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import resource
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import scaleout, scenarios, seed, verify
from bench.chain import chain_rows
from bench.rows import BY_NAME, Row, Spec, in_the_way, select
from bench.servers import (
    Served,
    plain_postgres_database,
    postgres_database,
    postgres_reachable,
    sqlite_database,
    write_config,
)
from bench.stage import Sizes, Stage

CHAIN = {"chain-postgres-spread", "chain-postgres-one"}
DEFAULT_POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
_DURABLE = "Durable floor on {}: the floor plus one commit at invoke and one at the answer"
# The rows each server of a durable-floor comparison measures, by kind of measurement.
_SIDES: dict[str, dict[str, str]] = {
    side: {
        "roundtrip-ws": f"roundtrip-ws-{side}",
        "roundtrip-lp": f"roundtrip-lp-{side}",
        "throughput": f"throughput-{side}" if side != "postgres" else "throughput-postgres-1",
    }
    for side in ("floor-sqlite", "sqlite", "floor-postgres", "postgres")
} | {"postgres-2": {"throughput": "throughput-postgres-2"}}  # judged against one worker: in its turns
# A call under a standing mandate, judged against an allowed call on the same server: in its turns.
for _engine in ("sqlite", "postgres"):
    _SIDES[_engine]["roundtrip-ws-mandate"] = f"roundtrip-ws-{_engine}-mandate"


@dataclass
class Options:
    sizes: Sizes
    mode: str  # full, quick or smoke
    only: list[str] = field(default_factory=list)
    out: Path = Path("bench")
    postgres_admin: str | None = DEFAULT_POSTGRES_ADMIN  # None: SQLite only
    profile: bool = False  # sample the servers with py-spy in every timed window


@dataclass
class Results:
    rows: list[Row]
    machine: dict[str, Any]
    seconds: float
    mode: str
    notes: list[str]
    baseline: dict[str, Any] | None = None  # the compared file's machine facts

    def compare(self, baseline: dict[str, Any]) -> None:
        """Set each row's baseline from an earlier results.json."""
        values = {row["name"]: row.get("value") for row in baseline.get("rows", [])}
        for row in self.rows:
            row.baseline = values.get(row.spec.name)
        self.baseline = dict(baseline.get("machine", {}))

    def as_json(self) -> dict[str, Any]:
        return {
            "format": "tapgate-bench-1",
            "mode": self.mode,
            "machine": self.machine,
            "seconds": round(self.seconds, 1),
            "notes": self.notes,
            "baseline": self.baseline,
            "rows": [row.as_json() for row in self.rows],
            "targets": targets(self.rows),
        }


MAX_WRITING_PER_CALL = 2.0
MAX_IDLE_TRANSACTIONS_PER_SECOND = 5.0
MAX_CPU_TWO_WORKERS = 1.1  # server CPU per invocation with two workers within 10% of one


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    """Each target this run could judge: the row, what was measured, met or short."""
    out: list[dict[str, Any]] = []
    by_name = {row.spec.name: row for row in rows}
    for row in rows:
        spec = row.spec
        if spec.target is None or row.mark not in ("pass", "short"):
            continue
        ratio = row.judged_ratio
        durable = by_name.get(spec.durable) if spec.durable else None
        why = in_the_way(row, durable) if row.mark == "short" and durable is not None else None
        out.append(
            {
                "target": spec.target.text,
                "row": spec.name,
                "value": row.value,
                "ratio": ratio if spec.target.kind.startswith("ratio") else None,
                "mark": "met" if row.mark == "pass" else "short",
                **({"caveats": row.caveats} if row.caveats else {}),
                **({"in_the_way": why} if why else {}),
            }
        )
    out += _two_workers(rows)
    for row in rows:
        counted = row.detail.get("db_per_round_trip")
        # judged on the round trips (one call at a time: exact); a throughput row's counts also spread
        # its fifty links' start over the calls, and are reported in its details only
        if counted and row.spec.name.startswith("roundtrip-"):
            writing = counted["writing"]
            out.append(
                {
                    "target": "≤ 2 writing transactions per call",
                    "row": row.spec.name,
                    "value": writing,
                    "ratio": None,
                    "mark": "met" if writing <= MAX_WRITING_PER_CALL + 0.05 else "short",
                }
            )
        held = row.detail.get("db_per_second_held")
        if held:
            per_second = held["transactions"]
            out.append(
                {
                    "target": "idle: ≤ 5 database transactions a second",
                    "row": row.spec.name,
                    "value": per_second,
                    "ratio": None,
                    "mark": "met" if per_second <= MAX_IDLE_TRANSACTIONS_PER_SECOND else "short",
                }
            )
    return out


def _two_workers(rows: list[Row]) -> list[dict[str, Any]]:
    """No serialization point: the servers' CPU per invocation with two workers against one."""
    by_name = {row.spec.name: row for row in rows}
    one, two = by_name.get("throughput-postgres-1"), by_name.get("throughput-postgres-2")
    if one is None or two is None:
        return []
    per_one = one.detail.get("server_cpu_ms_per_invocation")
    per_two = two.detail.get("server_cpu_ms_per_invocation")
    if not per_one or not per_two:
        return []
    ratio = round(per_two / per_one, 3)
    return [
        {
            "target": "server CPU per invocation, 2 workers ≤ 1.1× 1 worker",
            "row": two.spec.name,
            "value": per_two,
            "ratio": ratio,
            "mark": "met" if ratio <= MAX_CPU_TWO_WORKERS else "short",
        }
    ]


def _rows_of(side: str) -> set[str]:
    return set(_SIDES[side].values())


@dataclass(frozen=True)
class _Side:
    """One running server of a durable-floor comparison, with the pairs seeded on it."""

    key: str  # of _SIDES
    served: Served
    pairs: list[seed.Pair]
    covered: seed.Pair | None = None  # an agent whose calls a standing mandate covers

    def measure(self, stage: Stage, kind: str, name: str) -> Callable[[], Awaitable[Row]]:
        if kind == "throughput":
            return lambda: scenarios.throughput(stage, name, self.served, self.pairs)
        if kind == "roundtrip-ws-mandate":
            assert self.covered is not None
            covered = self.covered
            return lambda: scenarios.roundtrip(stage, name, self.served, covered, "ws", covered=True)
        device = kind.removeprefix("roundtrip-")
        return lambda: scenarios.roundtrip(stage, name, self.served, self.pairs[0], device)


def median_turn(rows: list[Row]) -> Row:
    """The turn of a row measured in turns whose value is the median (the lower middle of an even
    count), with every turn's value in its details; a row no turn measured stays skipped."""
    measured = sorted((r for r in rows if r.value is not None), key=lambda r: r.value or 0.0)
    if not measured:
        return rows[0]
    chosen = measured[(len(measured) - 1) // 2]
    if len(rows) > 1:
        chosen.detail["turns"] = [r.value for r in rows]
    return chosen


def raise_file_limit() -> int:
    """Raise this process's open-file limit to its hard limit; the servers and clients inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        here = Path(__file__).resolve().parent
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],  # noqa: S607 (git from PATH)
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    import tapgate

    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tapgate": tapgate.__version__,
        "commit": commit,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "open_file_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }


class Bench:
    def __init__(self, options: Options, stage: Stage, say: Callable[[str], None]) -> None:
        self.options = options
        self.stage = stage
        self.say = say
        self.rows: dict[str, Row] = {}
        self.notes: list[str] = []
        self._shared: tuple[Served, str, seed.Tenant] | None = None

    @property
    def sizes(self) -> Sizes:
        return self.stage.sizes

    def keep(self, row: Row) -> None:
        self.rows[row.spec.name] = row
        shown = f"{row.value:,.2f} {row.spec.unit}" if row.value is not None else f"skipped: {row.skipped}"
        self.say(f"  {row.spec.name}: {shown}")

    def skip(self, spec: Spec, reason: str) -> None:
        self.rows[spec.name] = Row(spec, skipped=reason)

    @contextlib.asynccontextmanager
    async def sqlite(self, purpose: str, workers: int = 1) -> AsyncIterator[tuple[Served, str, seed.Tenant]]:
        """A tapgate server on a fresh SQLite database (in a smoke run, one shared by every row)."""
        if self.sizes.shared_sqlite and self._shared is not None:
            yield self._shared
            return
        folder = self.stage.work / purpose
        url = await sqlite_database(folder)
        tenant = await seed.new_tenant(url)
        served = Served.tapgate(f"sqlite-{purpose}", write_config(folder, url), self.stage.logs, workers)
        if self.sizes.shared_sqlite:
            await served.start()
            self.stage.servers.append(served)
            self._shared = (served, url, tenant)
            yield self._shared
            return
        async with self.stage.serving(served):
            yield served, url, tenant

    def close(self) -> None:
        if self._shared is not None:
            served = self._shared[0]
            self.stage.servers.remove(served)
            served.stop()
            self._shared = None

    async def run(self, specs: list[Spec]) -> None:
        want = {s.name for s in specs}
        if want & {"verify-raw", "approvals"}:
            self.say("Signature verification in this process: raw, and as tapgate verifies a decision")
            for row in verify.verification(self.sizes.verify_seconds):
                if row.spec.name in want:
                    self.keep(row)
        if want & {"roundtrip-ws-floor", "roundtrip-lp-floor", "throughput-floor"}:
            await self.floor(want)
        if want & (_rows_of("floor-sqlite") | _rows_of("sqlite")):
            await self.on_sqlite(want)
        postgres_rows = {
            s.name for s in specs if s.postgres and s.name not in scaleout.NAMES and s.name not in CHAIN
        }
        if postgres_rows:
            await self.postgres(postgres_rows)
        if "ingest" in want:
            await self.ingest()
        if "approvals-http" in want:
            await self.approvals()
        if want & CHAIN:
            await self.chain(want)
        if want & {"idle-ws", "idle-lp"}:
            await self.idle(want)
        if want & set(scaleout.NAMES):
            await scaleout.measure(self, want)

    async def floor(self, want: set[str]) -> None:
        self.say("Floor: in-memory Starlette on uvicorn, one worker")
        async with self.stage.serving(Served.floor(self.stage.logs)) as served:
            pairs = await seed.floor_pairs(served.url, max(1, self.sizes.pairs))
            for device in ("ws", "lp"):
                name = f"roundtrip-{device}-floor"
                if name in want:
                    self.keep(await scenarios.roundtrip(self.stage, name, served, pairs[0], device))
            if "throughput-floor" in want:
                self.keep(await scenarios.throughput(self.stage, "throughput-floor", served, pairs))

    async def on_sqlite(self, want: set[str]) -> None:
        """The durable floor on sqlite3 and tapgate on SQLite, both served at once and measured in turns."""
        async with contextlib.AsyncExitStack() as held:
            sides: list[_Side] = []
            if want & _rows_of("floor-sqlite"):
                self.say(_DURABLE.format("sqlite"))
                database = "sqlite:" + str(self.stage.work / "floor.db")
                served = Served.floor(self.stage.logs, database, name="floor-sqlite")
                floor = await held.enter_async_context(self.stage.serving(served))
                pairs = await seed.floor_pairs(floor.url, max(1, self.sizes.pairs))
                sides.append(_Side("floor-sqlite", floor, pairs))
            if want & _rows_of("sqlite"):
                self.say("tapgate on SQLite, one worker")
                served, _, tenant = await held.enter_async_context(self.sqlite("invocations"))
                pairs = await seed.tapgate_pairs(served.url, tenant, max(1, self.sizes.pairs))
                covered = await self.covered(want, "sqlite", served, tenant)
                sides.append(_Side("sqlite", served, pairs, covered))
            await self.in_turns(want, sides)

    async def covered(
        self, want: set[str], side: str, served: Served, tenant: seed.Tenant
    ) -> seed.Pair | None:
        """The agent whose calls standing mandates cover, seeded on ``served`` if its row is wanted, with
        uses enough for every turn's warm-up and calls."""
        if _SIDES[side]["roundtrip-ws-mandate"] not in want:
            return None
        sizes = self.sizes
        return await seed.mandated_pair(
            served.url, tenant, sizes.turns * (sizes.roundtrip_warmup + sizes.roundtrip_count)
        )

    async def in_turns(self, want: set[str], sides: list[_Side]) -> None:
        """Each wanted row of ``sides`` (servers running at once), measured ``turns`` times: a turn takes
        every row once, a durable floor right before the rows judged against it (the WebSocket round
        trips, then the long-poll ones, then throughput). Each row keeps its median turn, so a burst of
        other work on a shared machine moves one turn of one row, not a ratio."""
        measures: list[tuple[str, Callable[[], Awaitable[Row]]]] = []
        for kind in ("roundtrip-ws", "roundtrip-ws-mandate", "roundtrip-lp", "throughput"):
            for side in sides:
                name = _SIDES[side.key].get(kind)
                if name in want and name is not None:
                    measures.append((name, side.measure(self.stage, kind, name)))
        taken: dict[str, list[Row]] = {name: [] for name, _ in measures}
        turns = self.sizes.turns
        for turn in range(1, turns + 1):
            self.stage.turn = turn if turns > 1 else None
            for name, measure in measures:
                row = await measure()
                taken[name].append(row)
                if turns > 1:
                    shown = f"{row.value:,.2f} {row.spec.unit}" if row.value is not None else "skipped"
                    self.say(f"  turn {turn} of {turns}: {name} {shown}")
        self.stage.turn = None
        for rows in taken.values():
            self.keep(median_turn(rows))

    async def postgres(self, want: set[str]) -> None:
        admin = self.options.postgres_admin
        why = "SQLite only (--no-postgres)" if admin is None else await postgres_reachable(admin)
        if admin is None or why is not None:
            for name in sorted(want):
                self.skip(BY_NAME[name], why or "skipped")
            self.notes.append(why or "")
            self.say(f"Skipping the PostgreSQL rows: {why}")
            return
        self.stage.with_postgres = True
        async with postgres_database(admin) as url:
            tenant = await seed.new_tenant(url)
            config = write_config(self.stage.work / "postgres", url)
            pairs: list[seed.Pair] = []
            async with contextlib.AsyncExitStack() as held:
                sides: list[_Side] = []
                if want & _rows_of("floor-postgres"):
                    self.say(_DURABLE.format("postgres"))
                    floor_url = await held.enter_async_context(plain_postgres_database(admin))
                    served = Served.floor(self.stage.logs, floor_url, name="floor-postgres")
                    floor = await held.enter_async_context(self.stage.serving(served))
                    floor_pairs = await seed.floor_pairs(floor.url, max(1, self.sizes.pairs))
                    sides.append(_Side("floor-postgres", floor, floor_pairs))
                if want & _rows_of("postgres") or "throughput-postgres-2" in want:
                    self.say("tapgate on PostgreSQL, one worker")
                    one = await held.enter_async_context(
                        self.stage.serving(Served.tapgate("postgres-1", config, self.stage.logs))
                    )
                    pairs = await seed.tapgate_pairs(one.url, tenant, max(1, self.sizes.pairs))
                    covered = await self.covered(want, "postgres", one, tenant)
                    sides.append(_Side("postgres", one, pairs, covered))
                if "throughput-postgres-2" in want:
                    self.say("tapgate on PostgreSQL, two workers (the same database)")
                    served = Served.tapgate("postgres-2", config, self.stage.logs, workers=2)
                    two = await held.enter_async_context(self.stage.serving(served))
                    sides.append(_Side("postgres-2", two, pairs))
                await self.in_turns(want, sides)
        self.stage.with_postgres = False

    async def chain(self, want: set[str]) -> None:
        admin = self.options.postgres_admin
        why = "SQLite only (--no-postgres)" if admin is None else await postgres_reachable(admin)
        if admin is None or why is not None:
            for name in sorted(want & CHAIN):
                self.skip(BY_NAME[name], why or "skipped")
            return
        self.say("The tenant's chain head: 16 writers in one tenant, and spread over 16 (in this process)")
        for row in await chain_rows(admin, self.sizes.throughput_seconds):
            if row.spec.name in want:
                self.keep(row)

    async def ingest(self) -> None:
        self.say("SMS ingest on SQLite, one worker")
        async with self.sqlite("ingest") as (served, _, tenant):
            tokens = await seed.tapgate_devices(served.url, tenant, self.sizes.ingest_devices)
            self.keep(await scenarios.ingest(self.stage, served, tokens))

    async def approvals(self) -> None:
        self.say("Signed approval decisions on SQLite, one worker")
        async with self.sqlite("approvals") as (served, _, tenant):
            prepared = await seed.open_approvals(served.url, tenant, self.sizes.approvals)
            self.keep(await scenarios.decide(self.stage, served, prepared.decisions, prepared.setup_seconds))

    async def idle(self, want: set[str]) -> None:
        count = self.sizes.idle_devices
        if self.sizes.shared_sqlite:
            async with self.sqlite("idle") as (served, url, tenant):
                tokens = await seed.bulk_devices(url, tenant, count)
                for device in ("ws", "lp"):
                    if f"idle-{device}" in want:
                        self.keep(await scenarios.idle(self.stage, f"idle-{device}", served, tokens, device))
            return
        folder = self.stage.work / "idle"
        url = await sqlite_database(folder)
        tenant = await seed.new_tenant(url)
        self.say(f"Enrolling {count:,} idle devices through the store")
        started = time.monotonic()
        tokens = await seed.bulk_devices(url, tenant, count)
        enrol_seconds = time.monotonic() - started
        config = write_config(folder, url)
        for device in ("ws", "lp"):
            name = f"idle-{device}"
            if name not in want:
                continue
            kind = "WebSockets" if device == "ws" else "long-polls"
            self.say(f"{count:,} idle devices on {kind}, a fresh SQLite server")
            async with self.stage.serving(Served.tapgate(name, config, self.stage.logs)) as served:
                row = await scenarios.idle(self.stage, name, served, tokens, device)
                row.detail["enrol_seconds"] = round(enrol_seconds, 1)
                self.keep(row)


async def run_bench(options: Options, say: Callable[[str], None]) -> Results:
    """Measure the selected rows and judge each against its reference; nothing is written here."""
    started = time.monotonic()
    raise_file_limit()
    specs = select(options.only)
    facts = machine()
    with tempfile.TemporaryDirectory(prefix="tapgate-bench-") as tmp:
        work = Path(tmp)
        stage = Stage(
            options.sizes, logs=work / "logs", work=work, profiles=options.out if options.profile else None
        )
        bench = Bench(options, stage, say)
        try:
            await bench.run(specs)
        finally:
            bench.close()
            for client in list(stage.clients):
                await client.close()
            for served in list(stage.servers):
                served.stop()
    rows = []
    for spec in specs:
        row = bench.rows.get(spec.name) or Row(spec, skipped="not measured")
        reference = bench.rows.get(spec.reference) if spec.reference else None
        row.judge(reference, bench.rows.get(spec.durable) if spec.durable else None)
        rows.append(row)
    return Results(rows, facts, time.monotonic() - started, options.mode, [n for n in bench.notes if n])


def run(options: Options, say: Callable[[str], None]) -> Results:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        return asyncio.run(run_bench(options, say))
    return uvloop.run(run_bench(options, say))
