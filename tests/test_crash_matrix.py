"""The crash matrix: a real gateway killed (SIGKILL) at each named point of an invocation's life, many
seeds each, then started again; whatever the cut, every committed call has one row, ends by its
timeout, is answered at most once and is pushed at most 1 + retries times, and an uncommitted one leaves
no row and no push.

A seed picks the workload (how many calls, which are replayed, waited on, answered, answered twice,
approved or denied, left to expire) and at which hit of the point the gateway dies. `make test` runs one
seed per point on SQLite; `make reliability` runs many per point on SQLite and PostgreSQL.

This tree has no push worker yet: outbox rows are the pushes a worker would send. The push checks hold
with or without one (rows per device and call at most one, attempts at most 1 + the relay's two retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import websockets

from tapgate.adapters.store.migrate import migrate
from tapgate.adapters.store.sql import open_sql_store
from tapgate.domain.approvals import sign_decision, signed_text
from tapgate.faults import POINTS
from tapgate.services.journal import verify_audit
from tests.conftest import ADMIN_URL, PostgresDatabase, blocking, new_postgres_database
from tests.live import Server, free_port, write_config
from tests.reliability import FULL, Database, new_tenant, report, scaled
from tests.world import LAMP, Key, bearer, device_body, new_key

TIMEOUT = 60  # seconds a call waits for a device without a live link (and an approval for a decision)
LINKED_TIMEOUT = 1  # seconds a call waits for a device with a live link
PUSH_TRIES = 3  # one send and the relay's two retries (DESIGN §7)
RESOLUTIONS = ("invocation.answered", "invocation.expired", "invocation.failed", "invocation.refused")
DOOR = LAMP | {"name": "unlock_door", "description": "Unlock the front door.", "confirm": True}
SEEDS = scaled(1, 8)


# A connection closed under a request before any answer: the gateway died, or a live one closed an idle
# keep-alive connection as the request went out. Which one, only the process says.
DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError)
DROPPED_TRIES = 4  # a live gateway that drops the same request four times in a row is a failure
EXIT_SECONDS = 30  # how long a gateway that refuses connections has to show it exited


class Died(Exception):
    """The gateway's process exited under a request."""


async def _exited(server: Server, within: float) -> bool:
    """Whether the gateway's process has exited, waiting up to ``within`` seconds for it to."""
    process = server.process
    if process is None:
        return True
    try:
        await asyncio.to_thread(process.wait, within)
    except subprocess.TimeoutExpired:
        return False
    return True


@dataclass
class Run:
    """What the agent and the devices were told while one scenario ran."""

    server: Server
    client: httpx.AsyncClient
    tokens: dict[str, str]
    keys: dict[str, Key]
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)  # invocation id → arguments
    tools: dict[str, str] = field(default_factory=dict)
    answered_invoke: set[str] = field(default_factory=set)  # the agent got a view for these
    lost_invoke: set[str] = field(default_factory=set)  # sent, no answer came
    device_ok: dict[str, list[str]] = field(default_factory=dict)  # id → statuses accepted with 200
    device_sent: dict[str, set[str]] = field(default_factory=dict)  # id → statuses a device posted
    lost_answers: set[str] = field(default_factory=set)

    async def request(self, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
        """One request; a connection dropped before any answer is sent again while the gateway runs.

        Only the process having exited says the gateway died: a live server may close an idle
        keep-alive connection just as a request goes out on it (an ordinary event on a busy machine),
        and every request of the workload is safe to repeat (calls carry their id, a second answer or
        decision is refused as already given)."""
        for attempt in range(1, DROPPED_TRIES + 1):
            try:
                return await self.client.request(method, path, headers=bearer(self.tokens[token]), **kwargs)
            except httpx.TransportError as e:
                # Refused outright: nothing listens, so the process is going or gone; wait long for it.
                if await _exited(self.server, EXIT_SECONDS if isinstance(e, httpx.ConnectError) else 1):
                    raise Died(path) from e
                if not isinstance(e, DROPPED) or attempt == DROPPED_TRIES:
                    raise
        raise AssertionError("unreachable")

    async def invoke(self, invocation_id: str, tool: str, wait: float = 0) -> dict[str, Any] | None:
        self.arguments.setdefault(
            invocation_id, {"on": True, "brightness": random.Random(invocation_id).randint(0, 100)}
        )
        self.tools[invocation_id] = tool
        body = {"tool": tool, "arguments": self.arguments[invocation_id], "invocation_id": invocation_id}
        if wait:
            body["wait"] = wait
        try:
            r = await self.request("POST", "/v1/invocations", "agent", json=body)
        except Died:
            self.lost_invoke.add(invocation_id)
            raise
        assert r.status_code == 200, r.text
        self.answered_invoke.add(invocation_id)
        self.lost_invoke.discard(invocation_id)
        return dict(r.json())

    async def answer(self, device: str, invocation_id: str, status: str) -> int:
        self.device_sent.setdefault(invocation_id, set()).add(status)
        try:
            r = await self.request(
                "POST", f"/v1/device/invocations/{invocation_id}/result", device, json={"status": status}
            )
        except Died:
            self.lost_answers.add(invocation_id)
            raise
        assert r.status_code in (200, 409, 410), r.text
        if r.status_code == 200:
            self.device_ok.setdefault(invocation_id, []).append(status)
        return r.status_code

    async def fetch(self, device: str) -> list[str]:
        r = await self.request("GET", "/v1/device/invocations", device)
        assert r.status_code == 200, r.text
        return [i["id"] for i in r.json()["invocations"]]

    async def decide_all(self, rng: random.Random) -> int:
        """The phone signs a decision for each approval in its inbox; how many it sent."""
        r = await self.request("GET", "/v1/inbox", "phone")
        assert r.status_code == 200, r.text
        sent = 0
        for approval in r.json()["approvals"]:
            decision = rng.choice(["approved", "approved", "denied"])
            sign = approval["sign"]
            text = signed_text(
                sign["format"],
                approval["id"],
                decision,
                approval["kind"],
                approval["subject"],
                sign["action_sha256"],
                sign["challenge"],
                sign["expires_at"],
            )
            signature = sign_decision(self.keys["phone"].private, text)
            r = await self.request(
                "POST",
                f"/v1/approvals/{approval['id']}",
                "phone",
                json={"decision": decision, "signature": signature},
            )
            # A signature that comes as its window closes is refused like any other (403, opaque).
            late = r.status_code == 403 and time.time() >= sign["expires_at"] - 1
            assert r.status_code in (200, 409, 410) or late, r.text
            sent += 1
        return sent


# How many times the workload is sure to reach each point, so the chosen hit always comes.
SURE_HITS = {
    "invoke.before_commit": 8,
    "invoke.after_commit": 8,
    "result.waiting": 2,
    "answer.after_commit": 2,
    "expiry.sweep": 2,
    "approval.verify": 2,
}


async def _setup(client: httpx.AsyncClient, operator: str, keys: dict[str, Key]) -> dict[str, str]:
    as_operator = bearer(operator)
    r = await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)
    assert r.status_code == 201, r.text
    r = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)
    tokens = {"agent": r.json()["token"], "operator": operator}
    push = {"kind": "fcm", "token": "T"}
    for name, device_id, caps, grants in (
        ("lamp", "desk-lamp", [LAMP], ["set_light"]),
        ("hall", "hall-lamp", [LAMP], ["set_light"]),
        ("door", "front-door", [DOOR], ["unlock_door"]),
        ("phone", "ana-phone", [], []),
    ):
        body = device_body(device_id, caps, keys[name], grants=grants, push=push)
        r = await client.post("/v1/users/ana/devices", json=body, headers=as_operator)
        assert r.status_code == 201, r.text
        tokens[name] = r.json()["device_token"]
    return tokens


LAMP_TOOL = "device__desk_lamp__set_light"
HALL_TOOL = "device__hall_lamp__set_light"
DOOR_TOOL = "device__front_door__unlock_door"
DEVICE_OF = {LAMP_TOOL: "lamp", HALL_TOOL: "hall", DOOR_TOOL: "door"}


async def _workload(run: Run, rng: random.Random, seed: int, db: Database, tenant: str) -> None:
    """Calls, replays, waits, answers (some twice), approvals, and calls to a linked lamp that nobody
    answers, so the sweep ends them; raises Died. The desk lamp's calls wait a minute, so a slow machine
    changes nothing about which points the workload reaches."""
    ids = [f"c{seed}-{i}" for i in range(rng.randint(6, 8))]
    made: list[str] = []
    for i in range(0, len(ids), 2):  # two at a time, now and then a replay beside them
        batch = [run.invoke(j, LAMP_TOOL) for j in ids[i : i + 2]]
        if made and rng.random() < 0.5:
            batch.append(run.invoke(rng.choice(made), LAMP_TOOL))
        await _all(batch)
        made.extend(ids[i : i + 2])
    # Calls to the hall lamp, whose live link never answers: they expire after LINKED_TIMEOUT.
    await _all([run.invoke(f"h{seed}-{i}", HALL_TOOL) for i in range(rng.randint(2, 3))])
    # The agent waits on two calls nobody answers yet.
    await _all([run.request("GET", f"/v1/invocations/{j}?wait=2", "agent") for j in made[:2]])
    # The lamp answers some calls, one of them twice at once; the rest wait for the restart.
    fetched = await run.fetch("lamp")
    rng.shuffle(fetched)
    keep = 2 + rng.randint(0, 1)
    answering = fetched[:-keep]
    assert len(answering) >= 2, fetched
    await _all([run.answer("lamp", answering[0], "done"), run.answer("lamp", answering[0], "failed")])
    for j in answering[1:]:
        await run.answer("lamp", j, rng.choice(["done", "declined", "failed"]))
    # Two calls that ask the person; the phone signs a decision for each.
    await _all([run.invoke(f"d{seed}-{i}", DOOR_TOOL) for i in range(2)])
    await run.decide_all(rng)
    for j in await run.fetch("door"):
        if rng.random() < 0.5:
            await run.answer("door", j, "done")
    # Nobody reads the hall lamp's calls: only the sweep can end them.
    await _until_closed(run, db, tenant, "h%", seconds=LINKED_TIMEOUT + 20)
    raise AssertionError("the workload ended and the gateway still runs")


async def _all(calls: list[Any]) -> None:
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def _until_closed(run: Run, db: Database, tenant: str, ids: str, seconds: float) -> None:
    """Until no call whose id is like ``ids`` is open."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        if await _exited(run.server, 0):
            raise Died("the server ended")
        open_ = await db.rows(
            "SELECT invocation_id FROM invocations WHERE tenant_id = $1 "
            "AND status IN ('pending', 'awaiting_approval') AND invocation_id LIKE $2",
            tenant,
            ids,
        )
        if not open_:
            return
        assert loop.time() < deadline, f"still open after {seconds}s: {open_}"
        await asyncio.sleep(0.1)


async def _recover(run: Run, db: Database, tenant: str, rng: random.Random) -> None:
    """After the restart: the agent replays what it never heard back about, the devices fetch and answer
    again, the phone decides what still waits, and then the deadlines pass."""
    for invocation_id in sorted(run.lost_invoke):
        await run.invoke(invocation_id, run.tools[invocation_id])
    for invocation_id in sorted(run.lost_answers):
        device = DEVICE_OF[run.tools[invocation_id]]
        await run.answer(device, invocation_id, sorted(run.device_sent[invocation_id])[0])
    await run.decide_all(rng)
    for device in ("lamp", "door", "hall"):
        for j in await run.fetch(device):
            await run.answer(device, j, "done")
    await _until_closed(run, db, tenant, "%", seconds=LINKED_TIMEOUT + 20)


async def _check(run: Run, db: Database, tenant: str, database_url: str) -> dict[str, int]:
    rows = {
        r["invocation_id"]: r
        for r in await db.rows(
            "SELECT invocation_id, status, expires_at, resolved_at FROM invocations WHERE tenant_id = $1",
            tenant,
        )
    }
    # Every call the agent was told about has its row; nothing else made one.
    assert run.answered_invoke <= set(rows), run.answered_invoke - set(rows)
    assert set(rows) <= set(run.arguments), set(rows) - set(run.arguments)
    stuck = [i for i, r in rows.items() if r["status"] in ("pending", "awaiting_approval")]
    assert not stuck, f"stuck: {stuck}"
    store = open_sql_store(database_url)
    try:
        # The chain is whole after the cut. Reading it seals what a writer left pending (on PostgreSQL an
        # entry or event written while another transaction held the tenant's head is numbered by the
        # next holder or reader), so the plain reads below see every committed row.
        await verify_audit(store, tenant)
    finally:
        await store.close()
    journal = await db.rows("SELECT action, subject, outcome FROM audit_entries WHERE tenant_id = $1", tenant)
    resolved_events = await db.events(tenant, "invocation.resolved")
    double = []
    for invocation_id, row in rows.items():
        ends = [e for e in journal if e["subject"] == invocation_id and e["action"] in RESOLUTIONS]
        events = [e for e in resolved_events if e["invocation_id"] == invocation_id]
        if len(ends) != 1 or len(events) != 1:
            double.append((invocation_id, ends, events))
        assert ends[0]["outcome"] == row["status"]
        # G4: only a device's own result makes done, and the first accepted answer is the one kept.
        if row["status"] == "done":
            assert "done" in run.device_sent.get(invocation_id, set()), invocation_id
        accepted = run.device_ok.get(invocation_id, [])
        assert len(accepted) <= 1, (invocation_id, accepted)
        if accepted:
            assert row["status"] == accepted[0]
    assert not double, f"resolved other than once: {double}"
    approvals = await db.rows("SELECT approval_id, status FROM approvals WHERE tenant_id = $1", tenant)
    assert all(a["status"] != "pending" for a in approvals), approvals
    for a in approvals:
        decided = [
            e for e in journal if e["subject"] == a["approval_id"] and e["action"] == "approval.decided"
        ]
        assert len(decided) <= 1, decided
    # Pushes: at most one row per device and subject, each tried at most 1 + retries times.
    pushes = await db.rows(
        "SELECT subject_id, device_uid, count(*) AS n, max(attempts) AS tries FROM push_outbox "
        "WHERE tenant_id = $1 GROUP BY subject_id, device_uid",
        tenant,
    )
    assert all(p["n"] == 1 and p["tries"] <= PUSH_TRIES for p in pushes), pushes
    pushed = {p["subject_id"] for p in pushes}
    assert set(rows) - {i for i in rows if run.tools[i] == DOOR_TOOL} <= pushed
    assert pushed <= set(rows) | {a["approval_id"] for a in approvals}
    return {"calls": len(rows), "double": len(double), "stuck": len(stuck)}


async def _scenario(point: str, seed: int, database_url: str, db: Database, folder: Path) -> dict[str, int]:
    rng = random.Random(f"{point}/{seed}")
    hit = rng.randint(1, SURE_HITS[point])
    config = write_config(
        folder,
        database_url,
        invocation_timeout_seconds=TIMEOUT,
        device_call_timeout_seconds=LINKED_TIMEOUT,
        approval_sign_ttl_seconds=TIMEOUT,
        invocation_poll_seconds=0.2,
        # These devices forget what they held when the gateway dies: each fetch hands it all again.
        redelivery_seconds=0,
    )
    server = Server(config, env={"TAPGATE_CRASH_AT": point, "TAPGATE_CRASH_AFTER": str(hit)})
    # Scenarios run side by side in one event loop: a blocking start (it polls /readyz for up to 30 s)
    # or wait would stall the others' connections past the server's keep-alive, so both go to a thread.
    await asyncio.to_thread(server.start)
    try:
        tenant, operator = await new_tenant(database_url)
        keys = {n: new_key("ed25519" if n == "phone" else "p256") for n in ("lamp", "hall", "door", "phone")}
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            run = Run(server, client, await _setup(client, operator, keys), keys)
            async with _linked(server, run.tokens["hall"]):
                with pytest.raises(Died) as died:
                    await _workload(run, rng, seed, db, tenant)
            assert server.process is not None
            code = server.process.returncode if await _exited(server, 60) else None
            assert code == -9, f"the gateway did not die; the workload stopped on {died.value.__cause__!r}"
            assert f"crash point {point} reached" in server.logs(), f"seed {seed}: died elsewhere"
            server.process = None
            # An uncommitted call left nothing: a call the agent never heard back about has its row and
            # its push together, or neither; a cut before the commit leaves at least one with neither.
            uncommitted = 0
            for invocation_id in run.lost_invoke:
                row = await db.rows(
                    "SELECT 1 FROM invocations WHERE tenant_id = $1 AND invocation_id = $2",
                    tenant,
                    invocation_id,
                )
                push = await db.rows(
                    "SELECT 1 FROM push_outbox WHERE tenant_id = $1 AND subject_id = $2",
                    tenant,
                    invocation_id,
                )
                assert bool(row) == bool(push), invocation_id
                uncommitted += not row
            if point == "invoke.before_commit":
                assert uncommitted >= 1, run.lost_invoke
            server.env = {}
            # A new port: the old one was free while no gateway ran, and a parallel scenario may hold it.
            server.port = free_port()
            await asyncio.to_thread(server.start)
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            run.client = client  # no connection of the killed process is used again
            await _recover(run, db, tenant, rng)
            return await _check(run, db, tenant, database_url)
    except BaseException as e:
        e.add_note(f"crash scenario point={point} seed={seed}; replay: _scenario({point!r}, {seed}, ...)")
        code = server.process.poll() if server.process else None
        e.add_note(f"the gateway's exit status: {code}; it said: " + server.logs()[-1500:])
        raise
    finally:
        await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def _linked(server: Server, token: str) -> AsyncIterator[None]:
    """The hall lamp holds a live link (and never answers on it) until the gateway dies."""
    link = await websockets.connect(
        server.url.replace("http", "ws") + "/v1/device/connect", additional_headers=bearer(token)
    )

    async def drain() -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for _ in link:
                pass

    draining = asyncio.create_task(drain())
    try:
        yield
    finally:
        draining.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await draining
        await link.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file, copied for each scenario."""
    path = tmp_path_factory.mktemp("crash-template") / "tapgate.db"
    blocking(migrate(f"sqlite:///{path}"))
    return path


async def _matrix(scenarios: list[tuple[str, int]], make: Any, parallel: int) -> dict[str, int]:
    gate = asyncio.Semaphore(parallel)
    totals = {"scenarios": 0, "calls": 0, "double": 0, "stuck": 0}

    async def one(point: str, seed: int) -> None:
        async with gate:
            url, db, folder = await make(point, seed)
            # A bound for a hung scenario, not a speed requirement: a busy machine may take minutes.
            figures = await asyncio.wait_for(_scenario(point, seed, url, db, folder), timeout=300)
        totals["scenarios"] += 1
        for key in ("calls", "double", "stuck"):
            totals[key] += figures[key]

    await _all([one(point, seed) for point, seed in scenarios])
    return totals


async def test_a_gateway_killed_at_any_point_loses_no_call_and_answers_none_twice_on_sqlite(
    template: Path, tmp_path: Path
) -> None:
    async def make(point: str, seed: int) -> tuple[str, Database, Path]:
        folder = tmp_path / f"{point}-{seed}"
        folder.mkdir()
        shutil.copy(template, folder / "tapgate.db")
        url = f"sqlite:///{folder / 'tapgate.db'}"
        return url, Database(url), folder

    scenarios = [(point, seed) for point in POINTS for seed in range(SEEDS)]
    totals = await _matrix(scenarios, make, parallel=3)
    report("crash matrix sqlite", points=len(POINTS), seeds_per_point=SEEDS, **totals, lost=0)
    assert totals["scenarios"] == len(scenarios)


@pytest.fixture(scope="module")
def postgres_template() -> Iterator[PostgresDatabase]:
    """A migrated database that nothing connects to, copied for each scenario."""
    yield from new_postgres_database()


@pytest.mark.postgres
@pytest.mark.skipif(not FULL, reason="PostgreSQL crash scenarios run under `make reliability`")
async def test_a_gateway_killed_at_any_point_loses_no_call_and_answers_none_twice_on_postgresql(
    postgres_template: PostgresDatabase, tmp_path: Path
) -> None:
    # Each scenario gets a database of its own, as on SQLite: every gateway sweeps every tenant of its
    # database, so side by side in one database a scenario's sweep would end (and count) the other's calls.
    made: list[str] = []

    async def make(point: str, seed: int) -> tuple[str, Database, Path]:
        folder = tmp_path / f"{point}-{seed}"
        folder.mkdir()
        name = f"{postgres_template.name}_{len(made)}"
        made.append(name)
        copy = dataclasses.replace(
            postgres_template,
            name=name,
            app_url=postgres_template.app_url.rsplit("/", 1)[0] + "/" + name,
            admin_url=postgres_template.admin_url.rsplit("/", 1)[0] + "/" + name,
        )
        await _copy_database(postgres_template.name, name)
        return copy.app_url, Database(copy.app_url, copy.admin_url), folder

    scenarios = [(point, seed) for point in POINTS for seed in range(SEEDS)]
    try:
        totals = await _matrix(scenarios, make, parallel=2)
    finally:
        for name in made:
            await _drop_database(name)
    report("crash matrix postgres", points=len(POINTS), seeds_per_point=SEEDS, **totals, lost=0)
    assert totals["scenarios"] == len(scenarios)


async def _copy_database(template: str, name: str) -> None:
    conn = await asyncpg.connect(ADMIN_URL)
    try:
        await conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    finally:
        await conn.close()


async def _drop_database(name: str) -> None:
    conn = await asyncpg.connect(ADMIN_URL)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()


def test_every_crash_point_is_reached_by_the_workload() -> None:
    assert set(SURE_HITS) == set(POINTS)
