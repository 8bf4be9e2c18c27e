"""The bench's outputs: a rich table on the terminal, ``results.json``, and a PNG plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.rows import Row
from bench.runner import Results, targets

MARKS = {
    "pass": "[green]pass[/]",
    "short": "[red]short[/]",
    "info": "[dim]—[/]",
    "skipped": "[yellow]skipped[/]",
}


def _number(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    text = f"{value:,.2f}" if unit == "ms" or abs(value) < 10 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def _cpu(row: Row) -> str:
    if not row.cpu:
        return ""
    names = [("server", "srv"), ("client", "cli"), ("postgres", "pg"), ("other", "oth")]
    return " ".join(f"{short} {row.cpu[name]:.2f}" for name, short in names if name in row.cpu)


def table(results: Results) -> Table:
    facts = results.machine
    caption = (
        f"{facts['nproc']} × {facts['cpu_model']}, Python {facts['python']}, "
        f"commit {facts['commit'] or '?'}, {facts['date']}; {results.mode} run in {results.seconds:.0f} s. "
        "CPU in cores over each timed window."
    )
    out = Table(title="tapgate bench", caption=caption, show_lines=False)
    for heading, justify in (
        ("row", "left"),
        ("value", "right"),
        ("p99", "right"),
        ("reference", "right"),
        ("ratio", "right"),
        ("durable", "right"),
        ("tx (w) / stmt per call", "right"),
        ("target", "left"),
        ("mark", "left"),
        ("cpu: server client pg other", "left"),
    ):
        out.add_column(heading, justify=justify)  # type: ignore[arg-type]
    if results.baseline is not None:
        out.add_column("vs baseline", justify="right")
    for row in results.rows:
        spec = row.spec
        if row.skipped and row.value is None:
            out.add_row(
                spec.name,
                "",
                "",
                "",
                "",
                "",
                "",
                spec.target.text if spec.target else "",
                MARKS["skipped"],
                row.skipped,
                *([""] if results.baseline is not None else []),
            )
            continue
        ratio = f"{row.ratio:.2f}×" if row.ratio is not None else ""
        out.add_row(
            spec.name,
            _number(row.value, spec.unit),
            _number(row.p99, spec.unit) if row.p99 is not None else "",
            _number(row.reference_value, "") if row.reference_value is not None else "",
            ratio,
            f"{row.durable_ratio:.2f}×" if row.durable_ratio is not None else "",
            row.per_call(),
            spec.target.text if spec.target else "",
            MARKS[row.mark] + ("*" if row.caveats else ""),
            _cpu(row),
            *([_change(row)] if results.baseline is not None else []),
        )
    return out


def _change(row: Row) -> str:
    change = row.change()
    if change is None:
        return ""
    if change >= 1:
        return f"[green]{change:.2f}× better[/]"
    return f"[red]{1 / change:.2f}× worse[/]"


def print_table(results: Results, console: Console) -> None:
    console.print(table(results))
    if results.baseline is not None:
        facts = results.baseline
        console.print(
            f"Baseline: commit {facts.get('commit', '?')} of {facts.get('date', '?')}.", highlight=False
        )
    for row in results.rows:
        for caveat in row.caveats:
            console.print(f"[yellow]* {row.spec.name}: {caveat}[/]", highlight=False)
    for name, why in _in_the_way(results):
        console.print(f"Short: {name}: {why}", highlight=False)
    for note in results.notes:
        console.print(f"[yellow]{note}[/]", highlight=False)


def markdown(results: Results) -> str:
    """The table as Markdown, with the machine and every caveat, for docs/performance.md."""
    facts = results.machine
    lines = [
        f"{facts['nproc']} × {facts['cpu_model']}, Python {facts['python']}, "
        f"commit `{facts['commit'] or '?'}`, {facts['date']}, {results.mode} run in {results.seconds:.0f} s "
        "(load average at start "
        f"{', '.join(str(x) for x in facts['load_average_at_start'])}).",
        "",
        "| row | value | p99 | ratio to floor | ratio to durable floor | tx (writing) / statements per call "
        "| target | mark | CPU cores: server / client / pg / other |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for row in results.rows:
        spec = row.spec
        target = spec.target.text if spec.target else ""
        if row.value is None:
            lines.append(f"| {spec.name} | | | | | | {target} | skipped | {row.skipped or ''} |")
            continue
        cpu = " / ".join(
            f"{row.cpu[k]:.2f}" if k in row.cpu else "–" for k in ("server", "client", "postgres", "other")
        )
        mark = {"info": "—"}.get(row.mark, row.mark) + (" *" if row.caveats else "")
        lines.append(
            f"| {spec.name} | {_number(row.value, spec.unit)} | "
            f"{_number(row.p99, spec.unit) if row.p99 is not None else ''} | "
            f"{f'{row.ratio:.2f}×' if row.ratio is not None else ''} | "
            f"{f'{row.durable_ratio:.2f}×' if row.durable_ratio is not None else ''} | {row.per_call()} | "
            f"{target} | {mark} | "
            f"{cpu if row.cpu else ''} |"
        )
    caveats = [f"- {row.spec.name}: {c}" for row in results.rows for c in row.caveats]
    if caveats:
        lines += ["", "\\* caveats:", *caveats]
    short = [f"- {name}: {why}" for name, why in _in_the_way(results)]
    if short:
        lines += ["", "What stands between each short row and its durable floor:", *short]
    return "\n".join(lines) + "\n"


def _in_the_way(results: Results) -> list[tuple[str, str]]:
    """Each short target's row and what stands in its way (its CPU a call against its durable floor's)."""
    return [(t["row"], t["in_the_way"]) for t in targets(results.rows) if "in_the_way" in t]


def write_markdown(results: Results, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(results))


def write_json(results: Results, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results.as_json(), indent=2, ensure_ascii=False) + "\n")


def _bars(ax: Any, labels: list[str], values: list[float], colors: list[str], unit: str, title: str) -> None:
    positions = range(len(labels))
    ax.bar(positions, values, color=colors)
    ax.set_xticks(list(positions), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    for x, v in zip(positions, values, strict=True):
        ax.annotate(_number(v), (x, v), ha="center", va="bottom", fontsize=7)


def _color(row: Row) -> str:
    return {"pass": "#2e7d32", "short": "#c62828"}.get(row.mark, "#757575")


def write_plot(results: Results, path: Path) -> bool:
    """The figures as a PNG: latency, throughput, memory, ingest and approvals, and each target's ratio.
    False when matplotlib is not installed (``pip install 'tapgate[bench]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = {r.spec.name: r for r in results.rows if r.value is not None}
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    ax = axes[0][0]
    names = [n for n in rows if n.startswith("roundtrip-")]
    labels = [n.removeprefix("roundtrip-") for n in names]
    p50 = [rows[n].value or 0.0 for n in names]
    p99 = [rows[n].p99 or 0.0 for n in names]
    xs = list(range(len(names)))
    ax.bar([x - 0.2 for x in xs], p50, width=0.4, label="p50", color=[_color(rows[n]) for n in names])
    ax.bar([x + 0.2 for x in xs], p99, width=0.4, label="p99", color="#90a4ae")
    ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms (log scale)")
    ax.set_yscale("log")
    ax.set_title("Round trip of one invocation (p50 coloured by target, p99 grey)", fontsize=10)
    for x, v in zip(xs, p50, strict=True):
        ax.annotate(f"{v:.2f}", (x - 0.2, v), ha="center", va="bottom", fontsize=7)
    ax.legend(fontsize=8)
    names = [n for n in rows if n.startswith("throughput-")]
    axes[0][1].set_yscale("log")
    _bars(
        axes[0][1],
        [n.removeprefix("throughput-") for n in names],
        [rows[n].value or 0.0 for n in names],
        [_color(rows[n]) for n in names],
        "complete invocations / s (log scale)",
        "Throughput, concurrent agent/device pairs",
    )
    names = [n for n in rows if n.startswith("idle-")]
    ax = axes[0][2]
    _bars(
        ax,
        [f"{n} ({rows[n].detail.get('connected', 0):,})" for n in names],
        [rows[n].value or 0.0 for n in names],
        [_color(rows[n]) for n in names],
        "MiB RSS",
        "Idle devices: gateway resident memory",
    )
    ax.axhline(350, color="#c62828", linestyle="--", linewidth=1)
    names = [n for n in ("ingest",) if n in rows]
    ax = axes[1][0]
    _bars(
        ax,
        names,
        [rows[n].value or 0.0 for n in names],
        [_color(rows[n]) for n in names],
        "msg / s",
        "SMS ingest",
    )
    ax.axhline(2000, color="#c62828", linestyle="--", linewidth=1)
    names = [n for n in ("verify-raw", "approvals", "approvals-http") if n in rows]
    _bars(
        axes[1][1],
        names,
        [rows[n].value or 0.0 for n in names],
        [_color(rows[n]) for n in names],
        "per second",
        "Approval decisions against raw P-256 verify",
    )
    ax = axes[1][2]
    judged = [
        r for r in results.rows if r.spec.target is not None and r.value is not None and r.mark != "skipped"
    ]
    scores = [_score(r) for r in judged]
    _bars(
        ax,
        [r.spec.name for r in judged],
        scores,
        [_color(r) for r in judged],
        "× of target",
        "Each target (≥ 1 meets it)",
    )
    ax.axhline(1.0, color="#424242", linestyle="--", linewidth=1)
    facts = results.machine
    fig.suptitle(
        f"tapgate bench — {facts['nproc']} × {facts['cpu_model']}, Python {facts['python']}, "
        f"commit {facts['commit'] or '?'}, {facts['date']} ({results.mode})",
        fontsize=11,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _score(row: Row) -> float:
    """How far the row is toward its target: 1.0 exactly meets it, more is better."""
    target = row.spec.target
    assert target is not None and row.value is not None
    ratio = row.judged_ratio
    if target.kind == "ratio_max":
        return target.limit / ratio if ratio else 0.0
    if target.kind == "ratio_min":
        return (ratio or 0.0) / target.limit
    if target.kind == "max":
        return target.limit / row.value if row.value else 0.0
    return row.value / target.limit
