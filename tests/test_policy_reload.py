"""The policies file reloads without a restart: when it changes and on SIGHUP, whole or not at all."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from tapgate.adapters.store.migrate import migrate
from tapgate.config import Settings
from tests.agents import Home
from tests.conftest import PostgresDatabase, asgi_client, blocking
from tests.live import Server, write_config
from tests.world import LAMP, World, bearer, device_body

# A supervisor starts each worker as a new process that imports the whole app: slow on a busy machine.
WAIT_SECONDS = 120.0


async def _eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not await check():
        assert time.monotonic() < deadline, f"not within {WAIT_SECONDS}s: {what}"
        await asyncio.sleep(0.05)


def _version(n: int) -> str:
    """Two rules for the lamp: the first asks, the second (stricter) blocks. A reader that took only the
    first half of the file would ask; the whole file blocks, naming this version."""
    return (
        "version: 1\npolicies:\n"
        f"  - name: v{n:03d}-first-half\n    condition: deviceId equals desk-lamp\n"
        "    decision: require_approval\n"
        f"  - name: v{n:03d}-second-half\n    condition: deviceId equals desk-lamp\n    decision: block\n"
    )


def _replace(path: Path, text: str) -> None:
    """As an editor saves: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    fresh.replace(path)


async def test_reloads_under_concurrent_calls_never_show_a_call_half_a_file(
    tmp_path: Path, sqlite_url: str
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(_version(0))
    settings = Settings(
        database_url=sqlite_url, device_channel_enabled=True, device_sms_enabled=True, policies_file=str(path)
    )
    async with asgi_client(settings) as client:
        world = await World(client).start()
        await world.person("ana")
        agent = await world.agent("ana")
        await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
        reloader = client.app.state.gateway.policy_reloader  # type: ignore[attr-defined]
        reasons: list[str] = []
        stop = asyncio.Event()

        async def caller() -> None:
            while not stop.is_set():
                r = await client.post(
                    "/v1/invocations",
                    json={"tool": "device__desk_lamp__set_light", "arguments": {"on": True}},
                    headers=bearer(agent),
                )
                reasons.append(str(r.json()["reason"]))
                # A refused call in process never waits on anything, so this loop would never let the
                # event loop poll for the reload's file read finishing on its thread; a server's
                # requests each end, and the loop polls between them.
                await asyncio.sleep(0)

        async def reloading() -> int:
            swapped = 0
            for n in range(1, 21):
                _replace(path, _version(n))
                swapped += await reloader.reload()
                await asyncio.sleep(0)  # let the callers in between reloads
            return swapped

        callers = [asyncio.create_task(caller()) for _ in range(4)]
        swapped = await reloading()
        answered = len(reasons)

        async def more_calls() -> bool:
            return len(reasons) >= answered + 8  # every caller went round again after the last reload

        await _eventually(more_calls, "calls answered after the reloads")
        stop.set()
        await asyncio.gather(*callers)
        journal = (await client.get("/v1/audit?limit=1000", headers=bearer(world.operator))).json()["entries"]

    assert swapped == 20
    seen = {reason.split("'")[1] for reason in reasons}
    assert all(name.endswith("-second-half") for name in seen), seen
    assert all(r.endswith("blocks this call") for r in reasons)
    reloads = [e for e in journal if e["action"] == "policy.reloaded"]
    assert len(reloads) == 20
    assert reloads[-1]["data"]["sha256"] == hashlib.sha256(_version(20).encode()).hexdigest()


async def test_a_file_that_does_not_parse_keeps_the_rules_in_force_and_is_journalled(
    tmp_path: Path, sqlite_url: str
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(_version(1))
    settings = Settings(
        database_url=sqlite_url, device_channel_enabled=True, device_sms_enabled=True, policies_file=str(path)
    )
    async with asgi_client(settings) as client:
        world = await World(client).start()
        gateway = client.app.state.gateway  # type: ignore[attr-defined]
        in_force = gateway.ctx.policies
        _replace(path, _version(2).replace("decision: block", "decision: maybe"))
        assert await gateway.policy_reloader.reload() is False
        assert gateway.ctx.policies is in_force
        journal = (await client.get("/v1/audit?limit=1000", headers=bearer(world.operator))).json()["entries"]
    [failed] = [e for e in journal if e["action"] == "policy.reload_failed"]
    assert failed["reason"].startswith("line 8: decision: 'maybe' is not a decision")
    assert failed["outcome"] == "failed"


def _rewrite_unseen(path: Path, text: str) -> None:
    """New text of the same size, the modification time put back: a change no poll can see."""
    before = path.stat()
    path.write_text(text)
    assert path.stat().st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _rules(message: str) -> str:
    return (
        "version: 1\npolicies:\n  - name: doors-stay-locked\n    condition: capability equals unlock\n"
        f"    decision: block\n    message: {message}\n"
    )


def test_a_running_server_reloads_on_sighup_and_when_the_file_changes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tapgate.db'}"
    blocking(migrate(url))
    path = tmp_path / "policies.yaml"
    path.write_text(_rules("Locked AAAA"))
    server = Server(write_config(tmp_path, url, policies_file="policies.yaml")).start()
    try:
        blocking(_drive_a_live_server(server, url, path))
    finally:
        server.stop()


async def _drive_a_live_server(server: Server, url: str, path: Path) -> None:
    assert server.process is not None
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        home = await Home(server.url, client).build(url)

        async def reason() -> str:
            r = await client.post(
                "/v1/invocations",
                json={"tool": "device__front_door__unlock", "arguments": {}},
                headers=bearer(home.agent),
            )
            return str(r.json()["reason"])

        async def journal() -> list[dict[str, object]]:
            r = await client.get("/v1/audit?limit=1000", headers=bearer(home.operator))
            return list(r.json()["entries"])

        assert await reason() == "[policy] Locked AAAA (rule 'doors-stay-locked', line 3)"
        # SIGHUP: the same size and modification time, so only the signal can tell the server
        _rewrite_unseen(path, _rules("Locked BBBB"))
        server.process.send_signal(signal.SIGHUP)

        async def says(word: str) -> bool:
            return word in await reason()

        await _eventually(lambda: says("BBBB"), "the SIGHUP reload")
        # a change of the file, no signal
        _replace(path, _rules("Locked until the morning"))
        await _eventually(lambda: says("until the morning"), "the reload on a file change")
        # a broken file: the old rules stay, one log line, one journal entry
        _replace(path, _rules("Broken").replace("decision: block", "decision: nope"))

        async def failed() -> bool:
            return any(e["action"] == "policy.reload_failed" for e in await journal())

        await _eventually(failed, "the failed reload's journal entry")
        assert await says("until the morning")
        shas = [e["data"]["sha256"] for e in await journal() if e["action"] == "policy.reloaded"]  # type: ignore[index]
        assert shas[-1] == hashlib.sha256(_rules("Locked until the morning").encode()).hexdigest()
    assert server.process.poll() is None  # SIGHUP did not end the server
    log = [line for line in server.logs().splitlines() if "policies not reloaded" in line]
    assert len(log) == 1 and "line 5: decision: 'nope' is not a decision" in log[0]


@pytest.mark.postgres
def test_each_of_two_gateway_processes_reloads_the_changed_file(
    postgres: PostgresDatabase, tmp_path: Path
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(_rules("Locked AAAA"))
    config = write_config(tmp_path, postgres.app_url, policies_file="policies.yaml")
    first = Server(config).start()
    second = Server(config).start()
    try:
        blocking(_both_reload(first, second, postgres.app_url, path))
    finally:
        first.stop()
        second.stop()


async def _both_reload(first: Server, second: Server, url: str, path: Path) -> None:
    async with (
        httpx.AsyncClient(base_url=first.url, timeout=30) as one,
        httpx.AsyncClient(base_url=second.url, timeout=30) as two,
    ):
        home = await Home(first.url, one).build(url)

        async def reason(client: httpx.AsyncClient) -> str:
            r = await client.post(
                "/v1/invocations",
                json={"tool": "device__front_door__unlock", "arguments": {}},
                headers=bearer(home.agent),
            )
            return str(r.json()["reason"])

        assert "AAAA" in await reason(one) and "AAAA" in await reason(two)
        _replace(path, _rules("Locked on both"))

        async def both() -> bool:
            return "on both" in await reason(one) and "on both" in await reason(two)

        await _eventually(both, "both processes on the new rules")
        sha = hashlib.sha256(_rules("Locked on both").encode()).hexdigest()

        async def reloads() -> list[str]:
            r = await one.get("/v1/audit?limit=1000", headers=bearer(home.operator))
            return [e["data"]["sha256"] for e in r.json()["entries"] if e["action"] == "policy.reloaded"]

        async def journalled() -> bool:  # each process journals in every tenant, this one among them
            return len(await reloads()) >= 2

        await _eventually(journalled, "both processes' policy.reloaded in this tenant's journal")
        assert await reloads() == [sha, sha]  # one entry from each process


def _workers(server: Server) -> set[int]:
    """The process ids of a `serve --workers N` supervisor's workers."""
    assert server.process is not None
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return {int(c) for c in children if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text()}


@pytest.mark.postgres
def test_a_sighup_to_the_supervisor_with_a_broken_file_keeps_every_worker_serving(
    postgres: PostgresDatabase, tmp_path: Path
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(_rules("Locked AAAA"))
    config = write_config(tmp_path, postgres.app_url, policies_file="policies.yaml")
    server = Server(config, args=("--workers", "2")).start()
    try:
        blocking(_supervised(server, postgres.app_url, path))
    finally:
        server.stop()


async def _supervised(server: Server, url: str, path: Path) -> None:
    assert server.process is not None

    async def two_workers() -> bool:
        return len(_workers(server)) == 2

    await _eventually(two_workers, "two workers")
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        home = await Home(server.url, client).build(url)

        async def reason() -> str:
            r = await client.post(
                "/v1/invocations",
                json={"tool": "device__front_door__unlock", "arguments": {}},
                headers=bearer(home.agent),
            )
            return str(r.json()["reason"])

        assert "AAAA" in await reason()
        workers = _workers(server)
        # Broken, at the same size and modification time: only the supervisor's SIGHUP reads it.
        _rewrite_unseen(path, _rules("Locked AAAA").replace("decision: block", "decision: blork"))
        server.process.send_signal(signal.SIGHUP)

        async def kept() -> bool:
            return "the workers keep running" in server.logs()

        await _eventually(kept, "the supervisor's line")
        for _ in range(4):  # each worker still answers, with the rules in force
            assert "AAAA" in await reason()
        assert _workers(server) == workers
        lines = [line for line in server.logs().splitlines() if "SIGHUP" in line]
        assert len(lines) == 1, lines
        assert "policies.yaml line 5: decision: 'blork' is not a decision" in lines[0]

        _rewrite_unseen(path, _rules("Locked BBBB"))
        server.process.send_signal(signal.SIGHUP)

        async def restarted() -> bool:
            now = _workers(server)
            return len(now) == 2 and not now & workers and "BBBB" in await reason()

        await _eventually(restarted, "new workers on the fixed file")
    assert server.process.poll() is None
