"""The benchmark suite cannot rot: its smoke run measures every row at tiny sizes (timings never asserted)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.profile import parts, summarize
from bench.rows import BY_NAME, SPECS, Row, select
from bench.runner import median_turn, targets
from bench.scenarios import cpu_per_call
from tests.conftest import ADMIN_URL, PostgresDatabase


def test_the_smoke_run_measures_every_sqlite_row_and_skips_postgres_saying_why(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["mode"] == "smoke"
    assert {"nproc", "cpu_model", "python", "date", "commit"} <= set(results["machine"])
    rows = {row["name"]: row for row in results["rows"]}
    assert list(rows) == [spec.name for spec in SPECS]
    for name, row in rows.items():
        spec = BY_NAME[name]
        if spec.postgres:
            assert row["mark"] == "skipped" and "SQLite only" in row["skipped"], row
            continue
        assert isinstance(row["value"], int | float) and row["value"] > 0, row
        assert row["mark"] in ("pass", "short", "info"), row
        if spec.reference is not None and not BY_NAME[spec.reference].postgres:
            assert isinstance(row["ratio"], int | float) and row["ratio"] > 0, row
    assert rows["idle-ws"]["detail"]["connected"] == 20
    assert rows["idle-lp"]["detail"]["connected"] == 20
    assert rows["roundtrip-ws-sqlite"]["detail"]["errors"] == {}
    # every timed call of the mandate row went through a standing mandate instead of asking, and it is
    # judged against the allowed call measured on the same server
    assert rows["roundtrip-ws-sqlite-mandate"]["detail"]["errors"] == {}
    assert rows["roundtrip-ws-sqlite-mandate"]["reference"] == "roundtrip-ws-sqlite"
    assert rows["roundtrip-ws-sqlite-mandate"]["detail"]["db_per_round_trip"]["writing"] > 0
    # the durable floor is measured beside tapgate, and each call's database work is counted
    assert rows["roundtrip-ws-sqlite"]["durable_ratio"] > 0
    assert rows["roundtrip-ws-sqlite"]["detail"]["db_per_round_trip"]["writing"] > 0
    for name in ("roundtrip-ws-sqlite", "roundtrip-ws-floor-sqlite"):  # what a short row's target cites
        # (empty here: a smoke run's window is too short for the kernel's CPU accounting)
        assert "cpu_ms_per_invocation" in rows[name]["detail"], rows[name]["detail"]
    assert rows["idle-ws"]["detail"]["db_per_second_held"]["transactions"] >= 0
    assert (
        "db_per_round_trip" not in rows["roundtrip-ws-floor-sqlite"]["detail"]
        or not rows["roundtrip-ws-floor-sqlite"]["detail"]["db_per_round_trip"]
    )
    assert {t["mark"] for t in results["targets"]} <= {"met", "short"}
    assert any(t["target"] == "≤ 2 writing transactions per call" for t in results["targets"])
    assert (tmp_path / "results.png").stat().st_size > 10_000
    assert "| roundtrip-ws-sqlite |" in (tmp_path / "results.md").read_text()
    assert "roundtrip-ws-sqlite" in run.stdout


def test_only_names_a_row_with_the_rows_it_is_a_ratio_to() -> None:
    assert [s.name for s in select(["throughput-postgres-2"])] == [
        "throughput-floor",
        "throughput-floor-postgres",
        "throughput-postgres-1",
        "throughput-postgres-2",
    ]
    assert [s.name for s in select(["roundtrip-ws-sqlite-mandate"])] == [
        "roundtrip-ws-floor",
        "roundtrip-ws-floor-sqlite",
        "roundtrip-ws-sqlite",
        "roundtrip-ws-sqlite-mandate",
    ]
    assert {s.name for s in select(["roundtrip-ws-sqlite", "roundtrip-lp-sqlite"])} == {
        "roundtrip-ws-floor",
        "roundtrip-lp-floor",
        "roundtrip-ws-floor-sqlite",
        "roundtrip-lp-floor-sqlite",
        "roundtrip-ws-sqlite",
        "roundtrip-lp-sqlite",
    }
    with pytest.raises(ValueError, match="the rows are"):
        select(["no-such-row"])


def _throughput(name: str, rate: float, server_cores: float) -> Row:
    row = Row(BY_NAME[name], value=rate, cpu={"server": server_cores})
    row.detail["server_cpu_ms_per_invocation"] = round(server_cores * 1000 / rate, 3)
    return row


def test_two_workers_are_judged_on_their_cpu_per_invocation_and_on_throughput_only_with_the_cores() -> None:
    one = _throughput("throughput-postgres-1", 100.0, 0.9)  # 9 ms of server CPU a call
    for cores, per_call, mark in ((1.7, 9.444, "met"), (1.9, 10.556, "short")):
        two = _throughput("throughput-postgres-2", 180.0, cores)
        two.judge(one)
        judged = [t for t in targets([one, two]) if t["target"].startswith("server CPU per invocation")]
        assert judged == [
            {
                "target": "server CPU per invocation, 2 workers ≤ 1.1× 1 worker",
                "row": "throughput-postgres-2",
                "value": per_call,
                "ratio": round(per_call / 9.0, 3),
                "mark": mark,
            }
        ]
        # 1.8× one worker: met where the box has the four cores DESIGN §16 means, not judged on fewer
        if (os.cpu_count() or 1) >= 4:
            assert two.mark == "pass" and not two.caveats
        else:
            assert two.mark == "info"
            assert two.caveats == [
                f"not judged: its target needs 4 cores and this machine has {os.cpu_count()}"
            ]
            assert all(
                t["row"] != "throughput-postgres-2" or "CPU" in t["target"] for t in targets([one, two])
            )


def test_an_unknown_row_is_a_usage_error() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert "names no row" in run.stderr


def test_a_profile_summary_ranks_the_servers_own_work_below_the_event_loop(tmp_path: Path) -> None:
    loop = "thread (1): MainThread;<module> (tapgate/__main__.py:5);Runner.run (asyncio/runners.py:118)"
    folded = tmp_path / "p.folded"
    folded.write_text(
        f"{loop};answer (tapgate/services/answering.py:80);execute (sqlalchemy/engine/base.py:1) 3\n"
        f"{loop} 1\n"
        "thread (2): Thread-1 (_connection_worker_thread);Thread.run (threading.py:982);"
        "_connection_worker_thread (aiosqlite/core.py:59) 4\n"
    )
    summary = summarize(folded)
    assert "8 samples" in summary
    assert "50.0%  _connection_worker_thread" in summary
    assert "37.5%  answer (tapgate/services/answering.py)" in summary
    assert "12.5%  (event loop native code" in summary
    assert "<module>" not in summary
    assert "100% of them with their whole stack" in summary


def test_a_profile_summary_says_how_many_stacks_were_cut_off_from_their_root(tmp_path: Path) -> None:
    loop = "thread (1): MainThread;Runner.run (asyncio/runners.py:118)"
    folded = tmp_path / "p.folded"
    folded.write_text(
        f"{loop};answer (tapgate/services/answering.py:80) 3\n"
        "thread (1): MainThread;answer (tapgate/services/answering.py:80) 1\n"
    )
    assert "4 samples at 250/s (0.0 CPU seconds), 75% of them with their whole stack" in summarize(folded)


def test_a_profile_splits_the_servers_samples_by_the_innermost_frame_that_names_a_part(
    tmp_path: Path,
) -> None:
    loop = "thread (1): MainThread;Runner.run (asyncio/runners.py:118);serve (tapgate/api/ahead.py:9)"
    answer = f"{loop};answer (tapgate/services/answering.py:80)"
    folded = tmp_path / "p.folded"
    folded.write_text(
        # a repository's statement, and JSON its row needs: the store's
        f"{answer};SqlJournal.append (tapgate/adapters/store/sql_journal.py:5);run (sqlite_raw.py:46) 1\n"
        f"{answer};_entry_row (tapgate/adapters/store/sql_journal.py:329);dumps (json/__init__.py:231) 2\n"
        # the journal's hash, called by the repository: the gateway's (the domain's own work)
        f"{answer};SqlJournal.append (tapgate/adapters/store/sql_journal.py:5);"
        "entry_hash (tapgate/domain/audit.py:92);dumps (json/__init__.py:231) 3\n"
        f"{answer} 1\n"
        # the HTTP edge, and the event loop's own native code: the edges'
        f"{loop};send (uvicorn/protocols/http/httptools_impl.py:1) 2\n"
        "thread (1): MainThread;Runner.run (asyncio/runners.py:118) 1\n"
    )
    assert parts(folded) == {"store": 0.3, "gateway": 0.4, "edges": 0.3}
    assert "40.0%  gateway: the gateway's own work" in summarize(folded)
    (tmp_path / "empty.folded").write_text("")
    assert parts(tmp_path / "empty.folded") == {}


def test_a_short_target_with_both_profiles_says_each_parts_cpu_a_call_against_its_durable_floors() -> None:
    floor = Row(BY_NAME["throughput-floor-sqlite"], value=3000.0, cpu={"server": 0.9})
    floor.detail = {
        "cpu_ms_per_invocation": {"server": 0.3},
        "parts": {"store": 0.1, "gateway": 0.0, "edges": 0.9},
    }
    slow = Row(BY_NAME["throughput-sqlite"], value=900.0, cpu={"server": 0.9})
    slow.detail = {
        "cpu_ms_per_invocation": {"server": 1.0},
        "parts": {"store": 0.3, "gateway": 0.4, "edges": 0.3},
        "profile": "profile-throughput-sqlite-x.txt",
    }
    slow.judge(None, floor)
    [short] = [t for t in targets([floor, slow]) if t["row"] == "throughput-sqlite"]
    assert short["in_the_way"] == (
        "the server 1.00 ms of CPU a call against its durable floor's 0.30 ms (3.3×); "
        "the server's CPU a call by part, against its durable floor's: "
        "the store (repositories, SQLAlchemy, the driver) 0.30 ms against 0.03, "
        "the gateway's own work (check chain, journal, events) 0.40 ms against 0.00, "
        "the HTTP and WebSocket edges 0.30 ms against 0.27; where it goes: profile-throughput-sqlite-x.txt"
    )


def test_a_ratio_to_a_floor_measured_on_a_busy_machine_says_so() -> None:
    floor = Row(BY_NAME["throughput-floor-sqlite"], value=1000.0, cpu={"server": 0.9, "other": 0.75})
    floor.judge(None)
    tapgate = Row(BY_NAME["throughput-sqlite"], value=600.0, cpu={"server": 0.95, "other": 0.02})
    tapgate.judge(None, floor)
    assert tapgate.mark == "pass"  # 60% of a floor that other processes slowed down
    assert tapgate.caveats == [
        "its reference throughput-floor-sqlite ran while the machine was busy: its ratio is suspect"
    ]
    [judged] = [t for t in targets([floor, tapgate]) if t["row"] == "throughput-sqlite"]
    assert judged["mark"] == "met" and judged["caveats"] == tapgate.caveats


def test_cpu_a_call_is_each_sides_cores_over_the_calls_of_a_window() -> None:
    # 0.9 cores of server and 0.3 of PostgreSQL over calls 2 ms apart; the client's cores are not its
    assert cpu_per_call({"server": 0.9, "postgres": 0.3, "client": 0.5}, 0.002) == {
        "server": 1.8,
        "postgres": 0.6,
    }
    assert cpu_per_call({}, 0.002) == {}  # a window too short to measure


def test_a_short_target_says_each_sides_cpu_a_call_against_its_durable_floors_and_a_met_one_does_not() -> (
    None
):
    floor = Row(BY_NAME["roundtrip-ws-floor-sqlite"], value=0.5, cpu={"server": 0.6})
    floor.detail = {"cpu_ms_per_invocation": {"server": 0.25}}
    slow = Row(BY_NAME["roundtrip-ws-sqlite"], value=1.0, cpu={"server": 0.9})
    slow.detail = {"cpu_ms_per_invocation": {"server": 0.9}, "profile": "profile-roundtrip-ws-sqlite-x.txt"}
    slow.judge(None, floor)
    [short] = [t for t in targets([floor, slow]) if t["row"] == "roundtrip-ws-sqlite"]
    assert short["mark"] == "short"
    assert short["in_the_way"] == (
        "the server 0.90 ms of CPU a call against its durable floor's 0.25 ms (3.6×); "
        "where it goes: profile-roundtrip-ws-sqlite-x.txt"
    )
    pg_floor = Row(BY_NAME["throughput-floor-postgres"], value=1000.0, cpu={"server": 0.8})
    pg_floor.detail = {"cpu_ms_per_invocation": {"server": 0.4, "postgres": 0.5}}
    pg = Row(BY_NAME["throughput-postgres-1"], value=300.0, cpu={"server": 0.8})
    pg.detail = {"cpu_ms_per_invocation": {"server": 1.6, "postgres": 1.5}}
    pg.judge(None, pg_floor)
    [short] = [t for t in targets([pg_floor, pg]) if t["row"] == "throughput-postgres-1"]
    assert short["in_the_way"] == (
        "the server 1.60 ms of CPU a call against its durable floor's 0.40 ms (4.0×); "
        "PostgreSQL 1.50 ms of CPU a call against its durable floor's 0.50 ms (3.0×)"
    )
    fast = Row(BY_NAME["roundtrip-ws-sqlite"], value=0.6, cpu={"server": 0.9})
    fast.detail = {"cpu_ms_per_invocation": {"server": 0.3}}
    fast.judge(None, floor)
    [met] = [t for t in targets([floor, fast]) if t["row"] == "roundtrip-ws-sqlite"]
    assert met["mark"] == "met" and "in_the_way" not in met


@pytest.mark.parametrize("device", ["ws", "lp"])
def test_a_durable_floor_and_its_rows_are_measured_in_alternating_turns_keeping_each_rows_median(
    tmp_path: Path, device: str
) -> None:
    """Every turn measures both rows: on the long-poll, a turn's device must get its calls although the
    last turn's client left a poll held on the same server (the floor once handed them to it)."""
    row = f"roundtrip-{device}-sqlite"
    bench = ["--smoke", "--turns", "3", "--only", row, "--out", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "-m", "bench", *bench],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    said = [line.strip() for line in run.stdout.splitlines()]
    turns = [line.split(": ")[1].split()[0] for line in said if line.startswith("turn ")]
    # each turn: the durable floor, then the row judged against it
    assert turns == 3 * [f"roundtrip-{device}-floor-sqlite", row]
    results = {r["name"]: r for r in json.loads((tmp_path / "results.json").read_text())["rows"]}
    for name in (f"roundtrip-{device}-floor-sqlite", row):
        turns = results[name]["detail"]["turns"]
        assert None not in turns, (name, turns)
        assert len(turns) == 3 and results[name]["value"] == sorted(turns)[1]


def test_a_profiled_row_measured_in_turns_keeps_the_profile_and_parts_of_the_turn_it_keeps(
    tmp_path: Path,
) -> None:
    """--profile end to end: py-spy samples every server in every turn's window, a file a turn, and the
    row points at its kept turn's summary with that turn's parts."""
    row = "roundtrip-ws-sqlite"
    bench = ["--smoke", "--turns", "2", "--only", row, "--profile", "--out", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "-m", "bench", *bench],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    detail = {r["name"]: r for r in json.loads((tmp_path / "results.json").read_text())["rows"]}[row][
        "detail"
    ]
    kept = detail["turns"].index(sorted(detail["turns"])[0]) + 1  # of two turns, the lower middle
    assert detail["profile"].startswith(f"profile-{row}-") and detail["profile"].endswith(f"-turn{kept}.txt")
    for turn in (1, 2):  # each turn's window sampled the row's server, and the floor's beside it
        assert len(list(tmp_path.glob(f"profile-{row}-*-turn{turn}.folded"))) == 2
    summary = tmp_path / detail["profile"]
    if "parts" in detail:
        assert "By part" in summary.read_text()
        assert detail["parts"] == parts(summary.with_suffix(".folded"))
        assert abs(sum(detail["parts"].values()) - 1) < 0.01
    else:  # on a busy machine py-spy may take no sample in a smoke run's two seconds: the summary says so
        assert summary.read_text().startswith("No samples")


def _calls(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``python -m bench.calls`` with ``args``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "bench.calls", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_in_process_calls_run_through_the_gateway_and_say_what_the_store_counted() -> None:
    """``bench.calls``, what callgrind counts instructions over: the calls are real ones (two
    writing transactions each, no more statements than this round left a call; fewer commits with calls
    in flight at once), and a bad count is refused."""
    run = _calls("--calls", "40")
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["calls"] == 40 and result["cpu_us_per_call"] > 0
    assert result["wall_us_per_call"] > 0 and result["loop_cpu_us_per_call"] > 0
    assert result["writing_per_call"] == 2.0
    # What the store counted in the window: the calls', and the expiry sweep's if its pass (once a
    # second: a read of the tenants and one of the tenant's overdue calls) fell in it.
    assert 2.0 <= result["transactions_per_call"] <= 2.0 + 2 / 40
    assert 0 < result["statements_per_call"] <= 10 + 2 / 40
    refused = _calls("--calls", "0", timeout=60)
    assert refused.returncode == 2 and "--calls must be 1 or more" in refused.stderr
    at_once = _calls("--calls", "40", "--at-once", "20")
    assert at_once.returncode == 0, at_once.stdout + at_once.stderr
    grouped = json.loads(at_once.stdout)
    assert grouped["calls"] == 40 and grouped["at_once"] == 20
    assert grouped["writing_per_call"] < 2.0  # SQLite's units of work shared commits
    too_many = _calls("--calls", "5", "--at-once", "6", timeout=60)
    assert too_many.returncode == 2 and "--at-once must be from 1 to --calls" in too_many.stderr


@pytest.mark.postgres
def test_the_in_process_calls_run_on_postgresql_and_say_what_postgresql_spent(
    postgres: PostgresDatabase,
) -> None:
    """``bench.calls --postgres``: the same calls on a fresh PostgreSQL database it makes and
    drops, with PostgreSQL's CPU a call beside the process's own."""
    run = _calls("--calls", "5", "--postgres", ADMIN_URL)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["calls"] == 5 and result["postgres_cpu_us_per_call"] >= 0
    # Two writing transactions a call, and at most one more in the window: a background worker's pass
    # (the expiry sweep or the outbox) may land between the calls on a busy machine.
    assert 2.0 <= result["writing_per_call"] <= 2.0 + 1 / 5


def test_a_row_keeps_its_median_turn_and_a_row_no_turn_measured_stays_skipped() -> None:
    spec = BY_NAME["roundtrip-ws-sqlite"]
    rows = [Row(spec, value=v, detail={"n": n}) for n, v in enumerate((3.0, 9.0, 2.0))]
    chosen = median_turn(rows)
    assert chosen.value == 3.0 and chosen.detail == {"n": 0, "turns": [3.0, 9.0, 2.0]}
    even = median_turn([Row(spec, value=5.0), Row(spec, value=4.0)])
    assert even.value == 4.0  # the lower middle: a row is not judged on its better half
    skipped = median_turn([Row(spec, skipped="no round trip completed"), Row(spec, skipped="again")])
    assert skipped.value is None and skipped.skipped == "no round trip completed"


def test_the_installed_tapgate_carries_no_benchmark_and_points_to_make_bench() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tapgate", "bench", "--quick"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1
    assert "make bench" in run.stderr
    assert importlib.util.find_spec("tapgate.bench") is None
