"""The gateway's own work a call, in one process, for counting instructions.

``python -m bench.calls --calls N`` makes a fresh SQLite database with a tenant, a person, an agent
token and a lamp (through the HTTP API, in process), then runs N calls through the gateway itself — the
agent's invoke, then the device's result — with no HTTP, no load clients and no other process, after a
warm-up and with the cycle collector off while they run. It prints one JSON line: the calls, the CPU time
a call (the process's, and the event loop's thread's alone), the wall time a call, the transactions
and statements a call the store counted, and on SQLite the size of the WAL file at the end.
``--at-once N`` keeps N calls in flight (each of N tasks runs its share one after another), so that
SQLite's units of work share commits as they do under load; the default, 1, runs them one at a time.

Timed, the figure moves with the host like every other. Counted in instructions it hardly does: under
valgrind's callgrind two runs of the same code differ by up to about 2% of the calls' instructions
(SQLite's pages split where random ids fall), so a change of a few percent shows in two runs a side::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/calls.out \\
        .venv/bin/python -m bench.calls --calls 300   # prints "Collected : <instructions>"

Compare the totals of two runs with the same ``--calls`` (the setup is the same in both), or divide the
difference between 300 and 100 calls by 200 for the instructions a call (about 2.1 million on SQLite).

``--postgres ADMIN_URL`` runs the calls on a fresh PostgreSQL database and app role instead (made through
that superuser URL as the bench makes its own, dropped after), and adds PostgreSQL's CPU a call: every
PostgreSQL process's, as the bench meters it, so run it on an otherwise quiet server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric import ec

from bench import seed
from bench.meter import cpu_by_process, postgres_processes
from bench.servers import BENCH_SETTINGS, postgres_database
from tapgate.adapters.store.counting import COUNTS
from tapgate.adapters.store.migrate import migrate
from tapgate.bootstrap import build_app
from tapgate.config import Settings
from tapgate.domain.frames import DeviceResult
from tapgate.services.invoking import Call

WARM_UP = 50


@contextlib.asynccontextmanager
async def database(folder: Path, postgres_admin: str | None) -> AsyncIterator[str]:
    """A fresh SQLite database in ``folder``, or a fresh PostgreSQL database made through
    ``postgres_admin``, migrated; yields its URL."""
    if postgres_admin is not None:
        async with postgres_database(postgres_admin) as url:
            yield url
        return
    url = f"sqlite:///{folder / 'tapgate.db'}"
    await migrate(url)
    yield url


async def measure(calls: int, url: str, at_once: int = 1) -> dict[str, float]:
    """``calls`` calls through the gateway on the migrated database at ``url``, ``at_once`` of them in
    flight."""
    postgres = not url.startswith("sqlite")
    tenant = await seed.new_tenant(url)
    app = build_app(Settings.model_validate({"database_url": url, **BENCH_SETTINGS}))
    gateway = app.state.gateway
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://bench") as client,
    ):
        operator = seed.Operator(client, tenant.operator_token)
        await operator.user("person-0")
        agent_token = await operator.token("person-0", "agent")
        key = seed.public_key(ec.generate_private_key(ec.SECP256R1()))
        device_token = await operator.enrol("person-0", seed.device_body("lamp", [seed.LAMP], key))
        agent = await gateway.authenticate(agent_token)
        device = await gateway.authenticate_device(device_token)
        call = Call("device__lamp__set_light", {"on": True})

        async def one() -> None:
            view = await gateway.invoke(agent, call)
            await gateway.link_result(device, DeviceResult(view.id, "done", "ok"))

        async def share(n: int) -> None:
            for _ in range(n):
                await one()

        async def run(n: int) -> None:
            await asyncio.gather(*(share(n // at_once + (k < n % at_once)) for k in range(at_once)))

        await run(WARM_UP)
        gc.collect()
        gc.disable()  # a collection lands on whichever call allocates past its threshold
        try:
            server_before = cpu_by_process(postgres_processes()) if postgres else {}
            before = COUNTS.as_dict()
            started, loop_started, wall_started = time.process_time(), time.thread_time(), time.perf_counter()
            await run(calls)
            cpu = time.process_time() - started
            loop_cpu, wall = time.thread_time() - loop_started, time.perf_counter() - wall_started
            after = COUNTS.as_dict()
            server_after = cpu_by_process(postgres_processes()) if postgres else {}
        finally:
            gc.enable()
        wal = _wal_mib(url)
    server = {"postgres_cpu_us_per_call": round(_used(server_before, server_after) / calls * 1e6, 1)}
    return {
        "calls": calls,
        "at_once": at_once,
        "cpu_us_per_call": round(cpu / calls * 1e6, 1),
        "loop_cpu_us_per_call": round(loop_cpu / calls * 1e6, 1),
        "wall_us_per_call": round(wall / calls * 1e6, 1),
        **(server if postgres else {"wal_mib": wal}),
        **{f"{key}_per_call": round((after[key] - before[key]) / calls, 2) for key in after},
    }


def _wal_mib(url: str) -> float:
    """The size of a SQLite database's WAL file, in MiB (0 for PostgreSQL's or none)."""
    wal = Path(f"{url.removeprefix('sqlite:///')}-wal")
    return round(wal.stat().st_size / 2**20, 1) if url.startswith("sqlite") and wal.exists() else 0.0


def _used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the processes used between two readings (one that started between counts whole)."""
    return sum(max(0.0, seconds - before.get(pid, 0.0)) for pid, seconds in after.items())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300, help="calls to run after the warm-up")
    parser.add_argument("--at-once", type=int, default=1, help="calls in flight at once")
    parser.add_argument(
        "--postgres",
        metavar="ADMIN_URL",
        help="run on a fresh PostgreSQL database made through this superuser URL",
    )
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be 1 or more")
    if not 1 <= args.at_once <= args.calls:
        parser.error("--at-once must be from 1 to --calls")

    async def run(folder: Path) -> dict[str, float]:
        async with database(folder, args.postgres) as url:
            return await measure(args.calls, url, args.at_once)

    with tempfile.TemporaryDirectory(prefix="tapgate-calls-") as folder:
        result = asyncio.run(run(Path(folder)))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
