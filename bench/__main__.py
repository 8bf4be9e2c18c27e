"""``python -m bench`` (``make bench``): tapgate against a floor, in one run; prints a table and writes
results.json, results.md and results.png."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def fail(message: str) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(1)


@app.command()
def bench(
    quick: Annotated[
        bool, typer.Option("--quick", help="A short run: smaller sizes, shorter windows.")
    ] = False,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="Tiny sizes on SQLite only: checks that every row still runs.")
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Run this row (a name or a glob, e.g. 'roundtrip-*'); repeat for more."),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="Where results.json, results.md, results.png and profiles go.")
    ] = Path("bench/out"),
    postgres_admin: Annotated[
        str | None,
        typer.Option(
            help="A PostgreSQL superuser URL for the PostgreSQL rows (or TAPGATE_BENCH_POSTGRES_ADMIN).",
            show_default=False,
        ),
    ] = None,
    no_postgres: Annotated[bool, typer.Option("--no-postgres", help="Skip the PostgreSQL rows.")] = False,
    compare: Annotated[
        Path | None,
        typer.Option(help="An earlier results.json: show each row's change against it (e.g. a baseline)."),
    ] = None,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile", help="Sample the servers with py-spy in each timed window (OUT/profile-ROW-*.txt)."
        ),
    ] = False,
    turns: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=9,
            help="Measure each durable floor and the rows judged against it in this many alternating "
            "turns, keeping each row's median (default: 3 in a full run, 1 otherwise).",
            show_default=False,
        ),
    ] = None,
    bypass: Annotated[
        list[str] | None,
        typer.Option(
            "--bypass",
            help="Instead of the rows: measure what this bypass buys, tapgate with it against tapgate "
            "without it, in one run ('all' for each); repeat for more. Writes OUT/bypasses.json.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """The benchmark suite: tapgate against a floor, in one run; prints a table and writes
    results.json, results.md and results.png."""
    from rich.console import Console

    from bench import report, rows
    from bench.runner import DEFAULT_POSTGRES_ADMIN, Options, run
    from bench.stage import FULL, QUICK, SMOKE

    if quick and smoke:
        typer.echo("Choose one of --quick and --smoke.", err=True)
        raise typer.Exit(2)
    baseline = None
    if compare is not None:
        try:
            baseline = json.loads(compare.read_text())
        except (OSError, ValueError) as e:
            raise fail(f"--compare {compare} is not a results.json this bench wrote: {e}.") from None
    if profile:
        from bench.profile import py_spy

        if py_spy() is None:
            raise fail("--profile needs py-spy: install the bench extra (make .venv/.installed-bench).")
    try:
        rows.select(only or [])
    except ValueError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None
    admin = postgres_admin or os.environ.get("TAPGATE_BENCH_POSTGRES_ADMIN") or DEFAULT_POSTGRES_ADMIN
    sizes = SMOKE if smoke else QUICK if quick else FULL
    options = Options(
        sizes=sizes if turns is None else dataclasses.replace(sizes, turns=turns),
        mode="smoke" if smoke else "quick" if quick else "full",
        only=only or [],
        out=out,
        postgres_admin=None if (no_postgres or smoke) else admin,
        profile=profile,
    )
    console = Console(width=None if sys.stdout.isatty() else 160)
    if bypass:
        _bench_bypasses(options, bypass, console)
        return
    results = run(options, lambda line: console.print(line, highlight=False))
    if baseline is not None:
        results.compare(baseline)
    report.print_table(results, console)
    report.write_json(results, out / "results.json")
    report.write_markdown(results, out / "results.md")
    if profile:
        console.print(
            f"Profiles: {out}/profile-<row>-<server>[-turn<n>].txt (summaries) and .folded (stacks)."
        )
    if report.write_plot(results, out / "results.png"):
        console.print(f"Wrote {out / 'results.json'}, {out / 'results.md'} and {out / 'results.png'}.")
    else:
        console.print(f"Wrote {out / 'results.json'}; install matplotlib (the bench extra) for the plot.")


def _bench_bypasses(options: Any, asked: list[str], console: Any) -> None:
    from bench import bypass

    try:
        chosen = bypass.names(asked)
    except ValueError as e:
        raise fail(str(e)) from None

    def say(line: str) -> None:
        console.print(line, highlight=False)

    figures = bypass.run(options.sizes, chosen, options.postgres_admin, say)
    for f in figures:
        ratio = "" if f["ratio"] is None else f"  ×{f['ratio']:.3f} {f.get('ratio_turns', '')}"
        say(f"{f['engine']:8} {f['row']:13} {f['variant']:20} {f['value']}{ratio}")
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "bypasses.json").write_text(json.dumps(figures, indent=1) + "\n")
    say(f"Wrote {options.out / 'bypasses.json'}.")


if __name__ == "__main__":
    app()
