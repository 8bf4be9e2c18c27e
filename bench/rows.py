"""The rows of the bench's table: what each measures, what it is compared with, and its target.

Every row is an absolute figure and, where one is set, a ratio to a reference measured in the same run
(the floor, another row, or the raw signature-verify rate) with a pass or short mark. Targets are
reported, never asserted in tests: the machine is shared and noisy.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.profile import PART_NAMES

Mark = Literal["pass", "short", "info", "skipped"]
BUSY_CORES = 0.5  # other processes using this much CPU during a row make its figure suspect


@dataclass(frozen=True)
class Target:
    """``kind``: ``ratio_max`` (value/reference at most ``limit``), ``ratio_min`` (at least), ``max`` or
    ``min`` (the value itself)."""

    kind: Literal["ratio_max", "ratio_min", "max", "min"]
    limit: float
    text: str
    cores: int = 0  # judged only on a machine with at least this many cores (0: on any)

    def met(self, value: float, ratio: float | None) -> bool:
        if self.kind == "max":
            return value < self.limit
        if self.kind == "min":
            return value >= self.limit
        assert ratio is not None
        return ratio <= self.limit if self.kind == "ratio_max" else ratio >= self.limit


@dataclass(frozen=True)
class Spec:
    name: str
    title: str
    unit: str
    reference: str | None = None  # the row this one is a ratio to (the in-memory floor, or another row)
    target: Target | None = None
    postgres: bool = False
    durable: str | None = None  # the durable floor of the same engine: ratio targets are judged on it


_WS = Target("ratio_max", 1.5, "p50 ≤ 1.5× durable floor")
_LP = Target("ratio_max", 2.0, "p50 ≤ 2× durable floor")
# A call a mandate covers (it would otherwise ask) against an allowed call on the same server.
_MANDATE = Target("ratio_max", 1.1, "p50 ≤ 1.1× an allowed call's")
_HALF = Target("ratio_min", 0.5, "≥ 50% of durable floor")
SPECS: list[Spec] = [
    Spec("roundtrip-ws-floor", "Round trip, WebSocket device, floor", "ms"),
    Spec("roundtrip-lp-floor", "Round trip, long-poll device, floor", "ms"),
    Spec(
        "roundtrip-ws-floor-sqlite",
        "Round trip, WebSocket, durable floor (sqlite3)",
        "ms",
        "roundtrip-ws-floor",
    ),
    Spec(
        "roundtrip-lp-floor-sqlite",
        "Round trip, long-poll, durable floor (sqlite3)",
        "ms",
        "roundtrip-lp-floor",
    ),
    Spec(
        "roundtrip-ws-floor-postgres",
        "Round trip, WebSocket, durable floor (asyncpg)",
        "ms",
        "roundtrip-ws-floor",
        postgres=True,
    ),
    Spec(
        "roundtrip-lp-floor-postgres",
        "Round trip, long-poll, durable floor (asyncpg)",
        "ms",
        "roundtrip-lp-floor",
        postgres=True,
    ),
    Spec(
        "roundtrip-ws-sqlite",
        "Round trip, WebSocket device, SQLite",
        "ms",
        "roundtrip-ws-floor",
        _WS,
        durable="roundtrip-ws-floor-sqlite",
    ),
    Spec(
        "roundtrip-ws-sqlite-mandate",
        "Round trip, WebSocket device, SQLite, under a standing mandate",
        "ms",
        "roundtrip-ws-sqlite",
        _MANDATE,
    ),
    Spec(
        "roundtrip-lp-sqlite",
        "Round trip, long-poll device, SQLite",
        "ms",
        "roundtrip-lp-floor",
        _LP,
        durable="roundtrip-lp-floor-sqlite",
    ),
    Spec(
        "roundtrip-ws-postgres",
        "Round trip, WebSocket device, PostgreSQL",
        "ms",
        "roundtrip-ws-floor",
        _WS,
        True,
        durable="roundtrip-ws-floor-postgres",
    ),
    Spec(
        "roundtrip-ws-postgres-mandate",
        "Round trip, WebSocket device, PostgreSQL, under a standing mandate",
        "ms",
        "roundtrip-ws-postgres",
        _MANDATE,
        True,
    ),
    Spec(
        "roundtrip-lp-postgres",
        "Round trip, long-poll device, PostgreSQL",
        "ms",
        "roundtrip-lp-floor",
        _LP,
        True,
        durable="roundtrip-lp-floor-postgres",
    ),
    Spec("throughput-floor", "Throughput, floor (in memory)", "inv/s"),
    Spec("throughput-floor-sqlite", "Throughput, durable floor (sqlite3)", "inv/s", "throughput-floor"),
    Spec(
        "throughput-floor-postgres",
        "Throughput, durable floor (asyncpg)",
        "inv/s",
        "throughput-floor",
        postgres=True,
    ),
    Spec(
        "throughput-sqlite",
        "Throughput, SQLite, 1 worker",
        "inv/s",
        "throughput-floor",
        _HALF,
        durable="throughput-floor-sqlite",
    ),
    Spec(
        "throughput-postgres-1",
        "Throughput, PostgreSQL, 1 worker",
        "inv/s",
        "throughput-floor",
        _HALF,
        True,
        durable="throughput-floor-postgres",
    ),
    Spec(
        "throughput-postgres-2",
        "Throughput, PostgreSQL, 2 workers",
        "inv/s",
        "throughput-postgres-1",
        # "where the box has the cores": two busy workers, PostgreSQL and the load need four;
        # on fewer the CPU per invocation is judged instead (runner.targets)
        Target("ratio_min", 1.6, "≥ 1.6× 1 worker", cores=4),
        True,
    ),
    Spec("idle-ws", "Idle devices on WebSockets, RSS", "MiB", None, Target("max", 350, "< 350 MiB")),
    Spec("idle-lp", "Idle devices long-polling, RSS", "MiB", None, Target("max", 350, "< 350 MiB")),
    Spec("ingest", "SMS ingest, dedup and cap, SQLite", "msg/s", None, Target("min", 2000, "≥ 2,000/s")),
    Spec("verify-raw", "Raw P-256 signature verify, per CPU second", "verify/s"),
    Spec(
        "approvals",
        "Approval decisions verified in process, per CPU second",
        "dec/s",
        "verify-raw",
        Target("ratio_min", 0.6, "≥ 60% of raw verify"),
    ),
    Spec("approvals-http", "Signed approval decisions over HTTP, SQLite", "dec/s", "verify-raw"),
    # The tenant's chain head (bench/chain.py): 16 writers in one tenant against 16 tenants.
    Spec("chain-postgres-spread", "Journal writers, 16 tenants, PostgreSQL", "commit/s", postgres=True),
    Spec(
        "chain-postgres-one",
        "Journal writers, one tenant, PostgreSQL",
        "commit/s",
        "chain-postgres-spread",
        postgres=True,
    ),
    # Scale-out (bench/scaleout.py): N gateway processes on one PostgreSQL, per wake.
    *(
        Spec(
            f"scale-{wake}-{n}",
            f"Throughput, PostgreSQL, {n} gateway process{'es' if n > 1 else ''}, wake {wake}",
            "inv/s",
            f"scale-{wake}-1" if n > 1 else None,
            postgres=True,
        )
        for wake in ("postgres", "nats")
        for n in (1, 2, 3)
    ),
]
BY_NAME = {spec.name: spec for spec in SPECS}


def select(patterns: list[str]) -> list[Spec]:
    """The rows ``patterns`` (names or globs; empty for all) name, with the rows they are ratios to."""
    chosen: set[str] = set()
    for spec in SPECS:
        if not patterns or any(fnmatch.fnmatchcase(spec.name, p) for p in patterns):
            chosen.add(spec.name)
    if patterns and not chosen:
        names = ", ".join(s.name for s in SPECS)
        raise ValueError(f"--only {' '.join(patterns)} names no row; the rows are: {names}")
    for name in list(chosen):
        todo = [BY_NAME[name].reference, BY_NAME[name].durable]
        while todo:
            reference = todo.pop()
            if reference is not None:
                chosen.add(reference)
                todo += [BY_NAME[reference].reference, BY_NAME[reference].durable]
    return [s for s in SPECS if s.name in chosen]


@dataclass
class Row:
    """One measured (or skipped) row."""

    spec: Spec
    value: float | None = None
    p99: float | None = None
    ratio: float | None = None
    reference_value: float | None = None
    mark: Mark = "info"
    cpu: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    caveats: list[str] = field(default_factory=list)
    baseline: float | None = None  # the same row's value in the file given to --compare
    durable_ratio: float | None = None  # value / the durable floor of the same engine, same run
    durable_value: float | None = None

    @property
    def busy(self) -> bool:
        """Other processes used enough CPU during the row to move its figure."""
        return self.cpu.get("other", 0.0) >= BUSY_CORES

    @property
    def judged_ratio(self) -> float | None:
        """The ratio the target is judged on: to the durable floor where the row has one."""
        return self.durable_ratio if self.spec.durable else self.ratio

    def per_call(self) -> str:
        """Transactions (writing) / statements per round trip, as counted by the server, or ''."""
        counted = self.detail.get("db_per_round_trip")
        if not counted:
            return ""
        return f"{counted['transactions']:.1f} ({counted['writing']:.1f} w) / {counted['statements']:.1f}"

    def change(self) -> float | None:
        """How many times better than the baseline (above 1) or worse (below 1); None without one."""
        if self.value is None or not self.baseline:
            return None
        lower_is_better = self.spec.unit in ("ms", "MiB")
        return self.baseline / self.value if lower_is_better else self.value / self.baseline

    def judge(self, reference: Row | None, durable: Row | None = None) -> None:
        """Fill the ratios and the mark from the reference rows measured in the same run (a ratio target
        is judged on the durable floor where the row has one)."""
        if self.skipped is not None or self.value is None:
            self.mark = "skipped"
            return
        other = self.cpu.get("other", 0.0)
        if self.busy:
            self.caveats.append(f"the machine was busy: other processes used {other:.2f} cores meanwhile")
        for judged_against in (reference, durable):
            if judged_against is not None and judged_against.busy:
                self.caveats.append(
                    f"its reference {judged_against.spec.name} ran while the machine was busy: "
                    "its ratio is suspect"
                )
        if reference is not None and reference.value:
            self.reference_value = reference.value
            self.ratio = round(self.value / reference.value, 3)
        if durable is not None and durable.value:
            self.durable_value = durable.value
            self.durable_ratio = round(self.value / durable.value, 3)
        judged = self.durable_ratio if self.spec.durable else self.ratio
        target = self.spec.target
        if target is None:
            self.mark = "info"
        elif target.cores > (os.cpu_count() or 1):
            self.mark = "info"
            self.caveats.append(
                f"not judged: its target needs {target.cores} cores and this machine has {os.cpu_count()}"
            )
        elif target.kind.startswith("ratio") and judged is None:
            self.mark = "skipped"
            missing = self.spec.durable or self.spec.reference
            self.skipped = self.skipped or f"its reference {missing} was not measured"
        else:
            self.mark = "pass" if target.met(self.value, judged) else "short"

    def as_json(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "name": spec.name,
            "title": spec.title,
            "unit": spec.unit,
            "value": self.value,
            "p99": self.p99,
            "reference": spec.reference,
            "reference_value": self.reference_value,
            "ratio": self.ratio,
            "durable": spec.durable,
            "durable_value": self.durable_value,
            "durable_ratio": self.durable_ratio,
            "target": spec.target.text if spec.target else None,
            "mark": self.mark,
            "cpu_cores": self.cpu,
            "detail": self.detail,
            "skipped": self.skipped,
            "caveats": self.caveats,
            "baseline": self.baseline,
        }


def in_the_way(row: Row, durable: Row) -> str | None:
    """What stands between a row and its durable floor, as measured in the same run: each side's CPU a
    call (the server's, and PostgreSQL's where it runs), and with profiles of both the server's split by
    part against the floor's, and the profile to read where it goes."""
    mine, floor = row.detail.get("cpu_ms_per_invocation"), durable.detail.get("cpu_ms_per_invocation")
    if not mine or not floor:
        return None
    said = [
        f"{label} {mine[group]:.2f} ms of CPU a call against its durable floor's {floor[group]:.2f} ms "
        f"({mine[group] / floor[group]:.1f}×)"
        for group, label in (("server", "the server"), ("postgres", "PostgreSQL"))
        if mine.get(group) and floor.get(group)
    ]
    if not said:
        return None
    split = _by_part(
        mine.get("server"), row.detail.get("parts"), floor.get("server"), durable.detail.get("parts")
    )
    where = f"; where it goes: {row.detail['profile']}" if "profile" in row.detail else ""
    return "; ".join(said) + split + where


def _by_part(
    cpu: float | None,
    shares: dict[str, float] | None,
    floor_cpu: float | None,
    floor: dict[str, float] | None,
) -> str:
    """The server's CPU a call by part (profile.parts) against its durable floor's, or '' without both
    profiles."""
    if not cpu or not shares or not floor_cpu or not floor:
        return ""
    each = [
        f"{title} {shares.get(part, 0.0) * cpu:.2f} ms against {floor.get(part, 0.0) * floor_cpu:.2f}"
        for part, title in PART_NAMES.items()
    ]
    return "; the server's CPU a call by part, against its durable floor's: " + ", ".join(each)
