"""The bench's load client, a process of its own so that its CPU is counted apart from the servers'.

``python -m bench.client`` reads one JSON line from standard input, the job::

    {"mode": "roundtrip" | "throughput" | "idle" | "ingest" | "decide", "url": "http://127.0.0.1:P", ...}

and writes JSON lines to standard output: ``{"event": "ready", ...}`` once connected, then, after the
runner's ``{"start": t0, "end": t1}`` line (``time.monotonic()`` values, shared by every process on the
machine) or its ``stop`` line, ``{"event": "result", ...}``. Every loop stops by count and by time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from bench.wire import HttpConnection, WebSocketConnection, WireError

INVOKE_WAIT = 30.0  # seconds an agent's request waits for the device's answer
POLL_WAIT = 25  # seconds a busy long-polling device waits per fetch
IDLE_POLL_WAIT = 60  # the longest long-poll the API allows: an idle device asks as seldom as it can
CONNECT_TIMEOUT = 30.0
LINE_LIMIT = 1 << 26  # a job line carries up to 10,000 device tokens
UNCOVERED = "invoke done without a mandate"  # a covered round trip's call that no mandate covered


def emit(event: str, **data: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()


class Stdin:
    """Lines from the runner, read without blocking the loop."""

    def __init__(self) -> None:
        self._reader: asyncio.StreamReader | None = None

    async def line(self, within: float) -> str:
        if self._reader is None:
            loop = asyncio.get_running_loop()
            reader = self._reader = asyncio.StreamReader(limit=LINE_LIMIT)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        async with asyncio.timeout(within):
            return (await self._reader.readline()).decode().strip()

    async def window(self, within: float = 120.0) -> tuple[float, float]:
        go = json.loads(await self.line(within))
        return float(go["start"]), float(go["end"])


@dataclass
class Target:
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 80)

    async def http(self) -> HttpConnection:
        return await HttpConnection.open(self.host, self.port, within=CONNECT_TIMEOUT)

    async def websocket(self, token: str, on_text: Callable[[str], None]) -> WebSocketConnection:
        return await WebSocketConnection.open(
            self.host, self.port, "/v1/device/connect", token, on_text, within=CONNECT_TIMEOUT
        )


def _result_body(call_id: str) -> str:
    return json.dumps({"type": "device:result", "callId": call_id, "status": "done", "message": "ok"})


_DONE = json.dumps({"status": "done", "message": "ok"}).encode()


class Device:
    """A device that answers every invocation ``done`` at once, on a WebSocket or by long-polling."""

    def __init__(self, target: Target, token: str, mode: str) -> None:
        self.target, self.token, self.mode = target, token, mode
        self.answered = 0
        self.errors: Counter[str] = Counter()
        self._link: WebSocketConnection | None = None
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.mode == "ws":
            self._link = await self.target.websocket(self.token, self._on_frame)
        else:
            connection = await self.target.http()
            self._poller = asyncio.create_task(self._poll(connection))

    def _on_frame(self, text: str) -> None:
        frame = json.loads(text)
        if frame.get("type") == "device:invoke":
            assert self._link is not None
            self._link.send_text(_result_body(frame["callId"]))
            self.answered += 1
        elif frame.get("type") == "device:ack":
            if frame.get("status") != "accepted":
                self.errors[f"ack {frame.get('status')}"] += 1
        else:
            self.errors[f"frame {frame.get('type')}"] += 1

    async def _poll(self, connection: HttpConnection) -> None:
        path = f"/v1/device/invocations?wait={POLL_WAIT}"
        try:
            while True:
                r = await connection.request("GET", path, self.token, within=POLL_WAIT + 10)
                if r.status != 200:
                    self.errors[f"fetch {r.status}"] += 1
                    await asyncio.sleep(0.05)
                    continue
                for invocation in json.loads(r.body)["invocations"]:
                    answer = f"/v1/device/invocations/{invocation['id']}/result"
                    a = await connection.request("POST", answer, self.token, _DONE, within=30)
                    if a.status == 200:
                        self.answered += 1
                    else:
                        self.errors[f"result {a.status}"] += 1
        finally:
            connection.close()

    async def stop(self) -> None:
        if self._link is not None:
            self._link.close()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, WireError, TimeoutError):
                await self._poller
            self._poller = None


class Agent:
    """An agent that invokes one tool with a wait, again and again, timing each complete round trip."""

    def __init__(self, target: Target, token: str, tool: str, covered: bool = False) -> None:
        self.target, self.token = target, token
        self.covered = covered  # each call must go through a standing mandate, or it is not timed
        self.body = json.dumps({"tool": tool, "arguments": {"on": True}, "wait": INVOKE_WAIT}).encode()
        self.errors: Counter[str] = Counter()
        self.connection: HttpConnection | None = None

    async def start(self) -> None:
        self.connection = await self.target.http()

    async def invoke(self) -> float | None:
        """Seconds for one complete invocation, or None when it did not end ``done``."""
        assert self.connection is not None
        started = time.perf_counter()
        r = await self.connection.request("POST", "/v1/invocations", self.token, self.body, INVOKE_WAIT + 10)
        elapsed = time.perf_counter() - started
        view = json.loads(r.body) if r.status == 200 else {}
        status = view.get("status") if r.status == 200 else r.status
        if status != "done":
            self.errors[f"invoke {status}"] += 1
            return None
        if self.covered and not view.get("mandate_id"):
            self.errors[UNCOVERED] += 1
            return None
        return elapsed

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


def _errors(*counters: Counter[str]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for counter in counters:
        total.update(counter)
    return dict(total)


async def roundtrip(job: dict[str, Any], stdin: Stdin) -> dict[str, Any]:
    """One pair, one invocation at a time: warm up, then time ``count`` complete round trips."""
    target = Target.of(job["url"])
    [pair] = job["pairs"]
    device = Device(target, pair["device_token"], job["device"])
    agent = Agent(target, pair["agent_token"], pair["tool"], bool(job.get("covered")))
    await device.start()
    await agent.start()
    emit("ready")
    warm_until, end = await stdin.window()
    samples: list[float] = []
    warmed = 0
    try:
        for _ in range(int(job["warmup"])):
            if time.monotonic() > warm_until:
                break
            await agent.invoke()
            warmed += 1
        measured_from = time.monotonic()
        for _ in range(int(job["count"])):
            if time.monotonic() > end:
                break
            elapsed = await agent.invoke()
            if elapsed is not None:
                samples.append(elapsed)
        measured_for = time.monotonic() - measured_from
    finally:
        agent.close()
        await device.stop()
    errors = _errors(agent.errors, device.errors)
    return {"latencies": samples, "seconds": measured_for, "errors": errors, "warmed": warmed}


async def throughput(job: dict[str, Any], stdin: Stdin) -> dict[str, Any]:
    """Many pairs at once, each agent invoking again as soon as its call returns; completions counted
    inside the runner's window."""
    target = Target.of(job["url"])
    at = Target.of(job.get("device_url", job["url"]))  # the devices may link to another gateway
    devices = [Device(at, p["device_token"], job["device"]) for p in job["pairs"]]
    agents = [Agent(target, p["agent_token"], p["tool"]) for p in job["pairs"]]
    await asyncio.gather(*(d.start() for d in devices), *(a.start() for a in agents))
    emit("ready")
    start, end = await stdin.window()
    inside: list[float] = []
    everything = 0  # every call that completed, warm-up included (what the server's counts cover)

    async def loop(agent: Agent) -> None:
        nonlocal everything
        while time.monotonic() < end:
            elapsed = await agent.invoke()
            if elapsed is not None:
                everything += 1
                if start <= time.monotonic() <= end:
                    inside.append(elapsed)

    try:
        async with asyncio.timeout(end - time.monotonic() + INVOKE_WAIT + 15):
            await asyncio.gather(*(loop(a) for a in agents))
    finally:
        for agent in agents:
            agent.close()
        await asyncio.gather(*(d.stop() for d in devices))
    return {
        "completed": len(inside),
        "all_completed": everything,
        "seconds": end - start,
        "latencies": inside,
        "errors": _errors(*(a.errors for a in agents), *(d.errors for d in devices)),
    }


async def _bounded(jobs: Iterator[Awaitable[None]], concurrency: int) -> None:
    async def worker() -> None:
        for job in jobs:
            await job

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def idle(job: dict[str, Any], stdin: Stdin) -> dict[str, Any]:
    """Connect every device (WebSocket, or a long-poll that asks again whenever it is answered) within
    ``connect_seconds``, report, hold them until the runner says stop, then close them."""
    target = Target.of(job["url"])
    mode = job["device"]
    links: list[WebSocketConnection] = []
    polls: list[asyncio.Task[None]] = []
    errors: Counter[str] = Counter()
    frames = Counter[str]()

    def on_text(text: str) -> None:
        frames[str(json.loads(text).get("type"))] += 1

    async def poll(token: str, first: asyncio.Future[None]) -> None:
        connection = await target.http()
        path = f"/v1/device/invocations?wait={IDLE_POLL_WAIT}"
        try:
            while True:
                request = asyncio.ensure_future(
                    connection.request("GET", path, token, within=IDLE_POLL_WAIT + 60)
                )
                if not first.done():
                    # A long-poll is held once the server has read it; the first answer may be a minute
                    # away, so count the device as connected once its request went out on a live link.
                    await asyncio.sleep(0)
                    first.set_result(None)
                r = await request
                if r.status != 200:
                    errors[f"fetch {r.status}"] += 1
                    await asyncio.sleep(1)
        finally:
            connection.close()

    connected = 0
    started = time.monotonic()
    deadline = started + float(job.get("connect_seconds", 120))

    async def connect(token: str) -> None:
        nonlocal connected
        if time.monotonic() > deadline:
            errors["not attempted in time"] += 1
            return
        try:
            if mode == "ws":
                links.append(await target.websocket(token, on_text))
            else:
                first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                task = asyncio.create_task(poll(token, first))
                polls.append(task)
                await asyncio.wait({first, task}, return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    task.result()
            connected += 1
        except (OSError, WireError, TimeoutError) as e:
            errors[f"connect {type(e).__name__}"] += 1

    tokens: list[str] = job["device_tokens"]
    await _bounded((connect(t) for t in tokens), int(job.get("concurrency", 64)))
    connect_seconds = time.monotonic() - started
    emit("ready", connected=connected, seconds=connect_seconds)
    with contextlib.suppress(TimeoutError):
        await stdin.line(float(job.get("hold_seconds", 300)))
    dropped = sum(1 for link in links if link.closed) + sum(1 for task in polls if task.done())
    for link in links:
        link.close()
    for task in polls:
        task.cancel()
    await asyncio.gather(*polls, return_exceptions=True)
    return {
        "connected": connected,
        "connect_seconds": connect_seconds,
        "dropped_while_held": dropped,
        "frames": dict(frames),
        "errors": dict(errors),
    }


async def ingest(job: dict[str, Any], stdin: Stdin) -> dict[str, Any]:
    """SMS forwarded by many devices, distinct messages with every ``replay_every``-th a replay of one
    already sent; requests answered inside the window are counted by outcome."""
    target = Target.of(job["url"])
    tokens: list[str] = job["device_tokens"]
    replay_every = int(job.get("replay_every", 5))
    connections = [await target.http() for _ in range(int(job["concurrency"]))]
    emit("ready")
    start, end = await stdin.window()
    numbers = itertools.count()
    outcomes: Counter[str] = Counter()

    def message(n: int) -> tuple[str, bytes]:
        device = n % len(tokens)
        if n % replay_every == replay_every - 1 and n >= len(tokens):
            n -= len(tokens)  # the same device's message of one round ago, sent again
        body = {
            "channel": "sms",
            "sender": f"+1555{n % 9973:07d}",
            "body": f"Your parcel {n} arrives today between 10:00 and 12:00.",
            "received_at": f"2026-01-01T{(n // 3600) % 24:02d}:{(n // 60) % 60:02d}:{n % 60:02d}Z",
        }
        return tokens[device], json.dumps(body).encode()

    async def worker(connection: HttpConnection) -> None:
        try:
            while time.monotonic() < end:
                token, body = message(next(numbers))
                r = await connection.request("POST", "/v1/device/ingest", token, body, within=30)
                if not start <= time.monotonic() <= end:
                    continue
                if r.status == 202:
                    outcomes["duplicate" if json.loads(r.body).get("duplicate") else "stored"] += 1
                else:
                    outcomes[str(r.status)] += 1
        finally:
            connection.close()

    async with asyncio.timeout(end - time.monotonic() + 40):
        await asyncio.gather(*(worker(c) for c in connections))
    return {"outcomes": dict(outcomes), "seconds": end - start}


async def decide(job: dict[str, Any], stdin: Stdin) -> dict[str, Any]:
    """Post every prepared signed decision, ``concurrency`` at a time, and time the whole batch."""
    target = Target.of(job["url"])
    decisions: list[list[str]] = job["decisions"]
    connections = [await target.http() for _ in range(int(job["concurrency"]))]
    emit("ready")
    _, end = await stdin.window()
    pending = iter(decisions)
    outcomes: Counter[str] = Counter()

    async def worker(connection: HttpConnection) -> None:
        try:
            for approval_id, token, body in pending:
                if time.monotonic() > end:
                    outcomes["not sent"] += 1
                    continue
                r = await connection.request(
                    "POST", f"/v1/approvals/{approval_id}", token, body.encode(), within=30
                )
                outcomes["decided" if r.status == 200 else str(r.status)] += 1
        finally:
            connection.close()

    started = time.monotonic()
    async with asyncio.timeout(end - started + 40):
        await asyncio.gather(*(worker(c) for c in connections))
    return {"outcomes": dict(outcomes), "seconds": time.monotonic() - started}


MODES: dict[str, Callable[[dict[str, Any], Stdin], Awaitable[dict[str, Any]]]] = {
    "roundtrip": roundtrip,
    "throughput": throughput,
    "idle": idle,
    "ingest": ingest,
    "decide": decide,
}


async def _main() -> None:
    stdin = Stdin()
    job = json.loads(await stdin.line(60))
    result = await MODES[job["mode"]](job, stdin)
    emit("result", **result)


def main() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        asyncio.run(_main())
    else:
        uvloop.run(_main())


if __name__ == "__main__":
    main()
