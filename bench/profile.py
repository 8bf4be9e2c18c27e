"""``make bench BENCH_ARGS=--profile``: sample the servers with py-spy during each timed window, and say
where the CPU went.

py-spy attaches to the running server from outside (no change to the server, no restart) and writes
folded stacks (``bench/profile-<row>.folded``, one stack and its sample count a line; flame-graph tools
read it). Only threads holding the GIL are sampled, so the samples are the Python process's CPU work (a
thread waiting for a lock, a socket or SQLite's C code is not counted). The summary beside it (``.txt``)
ranks functions by their own samples and by the samples spent inside them, the packages the samples
landed in, and the part of the server each sample's work belongs to (``parts``): the store, the gateway's
own work, or the edges, so that a row short of its durable floor can say which part is in the way.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

RATE = 250  # samples per second
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    """The py-spy executable beside this Python, or on PATH; None when it is not installed."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


async def record(pid: int, seconds: float, output: Path) -> asyncio.subprocess.Process | None:
    """Start sampling ``pid`` and its children for ``seconds`` into ``output`` (folded stacks)."""
    executable = py_spy()
    if executable is None:
        return None
    output.parent.mkdir(parents=True, exist_ok=True)
    return await asyncio.create_subprocess_exec(
        executable,
        "record",
        "--pid",
        str(pid),
        "--subprocesses",
        "--duration",
        str(max(1, round(seconds))),
        "--rate",
        str(RATE),
        "--format",
        "raw",
        "--output",
        str(output),
        # Each sample stops the server for a moment: without that (--nonblocking) py-spy reads frames
        # while they change, and about two thirds of the stacks came back cut off from their root, which
        # left the inclusive figures (samples inside a function) at a third of their size.
        "--threads",
        "--gil",  # only threads holding the GIL: uvloop waits in C without a Python frame, so py-spy
        # cannot tell its idle waits from work; with --gil they drop out and what remains is CPU
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


# The parts of a server a sample's work belongs to: the innermost frame that names one decides (a JSON
# encoding called by the journal's hashing is the gateway's; one called by a repository is the store's).
# Checked in this order, so a repository's file is the store's before tapgate/adapters/ is the gateway's.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "store",  # the repositories, SQLAlchemy and the drivers: everything a statement costs in Python
        ("tapgate/adapters/store/", "sqlalchemy/", "asyncpg/", "sqlite3/", "bench/durable.py"),
    ),
    (
        "gateway",  # the check chain, the journal, events, handover and the rest of the call's own work
        (
            "tapgate/services/",
            "tapgate/domain/",
            "tapgate/gateway.py",
            "tapgate/flag.py",
            "tapgate/adapters/",
        ),
    ),
    # everything else is the edges: HTTP, WebSocket frames, JSON on the wire, the event loop
)
PART_NAMES = {
    "store": "the store (repositories, SQLAlchemy, the driver)",
    "gateway": "the gateway's own work (check chain, journal, events)",
    "edges": "the HTTP and WebSocket edges",
}

_ROOTS = ("Runner.run (", "Thread.run (", "WorkerThread.run (", "BaseProcess._bootstrap (")
_STDLIB = {"asyncio", "threading", "queue", "json", "selectors", "contextlib", "concurrent", "logging", "re"}


def _function(frame: str) -> str:
    """``Class.method (package/module.py)``: the frame without its line number."""
    match = _FRAME.match(frame.strip())
    return f"{match['function']} ({match['file']})" if match else frame.strip()


def _package(function: str) -> str:
    file = function.rpartition("(")[2].rstrip(")")
    if file.startswith("<") or "/" not in file:
        return "python"
    top = file.split("/", 1)[0]
    return f"stdlib {top}" if top in _STDLIB else top


def _thread(frames: list[str]) -> str:
    for frame in frames:
        if frame.startswith("thread "):
            name = frame.split(":", 1)[1].strip() if ":" in frame else frame
            return "event loop" if name == "MainThread" else name.split(" (")[-1].rstrip(")") or name
    return "event loop"


def _work(frames: list[str]) -> list[str]:
    """The frames below the event loop's or a thread's run: where the server's own work starts."""
    start = 0
    for i, frame in enumerate(frames):
        if frame.startswith(_ROOTS):
            start = i + 1
    return frames[start:] or frames[-1:]


def _part(work: list[str]) -> str:
    for function in reversed(work):
        file = function.rpartition("(")[2]
        for name, prefixes in PARTS:
            if file.startswith(prefixes):
                return name
    return "edges"


def parts(folded: Path) -> dict[str, float]:
    """Each part's share of ``folded``'s samples (0 to 1; {} without samples)."""
    counted: Counter[str] = Counter()
    for line in folded.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if frames and count_text.isdigit():
            counted[_part([_function(f) for f in _work(frames)])] += int(count_text)
    total = sum(counted.values())
    return {name: round(counted[name] / total, 3) for name in PART_NAMES} if total else {}


def _lines(counter: Counter[str], total: int, top: int) -> list[str]:
    return [f"  {n / total:6.1%}  {name}" for name, n in counter.most_common(top)]


def summarize(folded: Path, top: int = 25) -> str:
    """A plain-text ranking of ``folded``'s samples: threads, packages, functions by own samples and by
    samples inside them, and tapgate's own functions. A sample whose innermost frame is the event loop's
    ``Runner.run`` is time in native code under it (uvloop, httptools, socket calls)."""
    own: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = whole = 0
    for line in folded.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        every = [f for f in stack.split(";") if f]
        frames = [f for f in every if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        whole += count if any(f.startswith(_ROOTS) for f in frames) else 0
        threads[_thread(every)] += count
        work = [_function(f) for f in _work(frames)]
        leaf = work[-1]
        if leaf.startswith("Runner.run ("):
            leaf = "(event loop native code: uvloop, httptools, sockets)"
        own[leaf] += count
        packages[_package(leaf) if leaf[0] != "(" else "uvloop (native)"] += count
        for name in set(work):
            inside[name] += count
            if "(tapgate/" in name:
                ours[name] += count
    if not total:
        return "No samples: the server was idle, or py-spy could not attach (it needs ptrace).\n"
    lines = [
        f"{total} samples at {RATE}/s ({total / RATE:.1f} CPU seconds), {whole / total:.0%} of them with"
        " their whole stack (a cut-off stack counts only in its own functions' figures)",
        "",
        "By thread:",
    ]
    lines += _lines(threads, total, 8)
    lines += ["", "By package (own samples):", *_lines(packages, total, 15)]
    shares = parts(folded)
    lines += ["", "By part (the innermost frame that names one):"]
    lines += [f"  {shares[name]:6.1%}  {name}: {PART_NAMES[name]}" for name in PART_NAMES]
    lines += ["", "By function, own samples:", *_lines(own, total, top)]
    lines += ["", "By function, samples inside it (its callees included):", *_lines(inside, total, top)]
    lines += ["", "tapgate's functions, samples inside them:", *_lines(ours, total, top)]
    return "\n".join(lines) + "\n"
