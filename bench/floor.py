"""The floor: the least a gateway can do for an invocation, to measure tapgate against in the same run.

A plain Starlette app keeps everything in memory and does the same three requests as tapgate, with the
same paths and bodies: the agent's ``POST /v1/invocations`` with a wait, the device's fetch (a long-poll
``GET /v1/device/invocations`` or the ``/v1/device/connect`` WebSocket's ``device:invoke`` frame), and
the device's result (``POST /v1/device/invocations/{id}/result`` or a ``device:result`` frame). An
asyncio.Event per device and per invocation is the wake. It is served by uvicorn with the options
``tapgate serve`` uses (``tapgate.cli.UVICORN_OPTIONS``), one worker.

No checks, no durability, no audit: what tapgate costs beyond this is what its guarantees cost.
``POST /floor/pairs`` makes agent and device tokens for the bench; it is the floor's only extra route.

With ``--durable sqlite:PATH`` or ``--durable postgresql://…`` it is a **durable floor**: the
same app plus the least a durable call writes, through the raw driver — one transaction at invoke (insert
the call, and a journal row) and one at the answer (update the call if still pending, and a journal row) —
so that what tapgate costs beyond it is what its checks, audit chain and events cost, not durability.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from bench.durable import Durable, open_durable

MAX_WAIT = 300.0
MAX_FETCH = 50


@dataclass(eq=False)
class _Invocation:
    id: str
    tool: str
    device: _Device
    arguments: Any
    status: str = "pending"
    message: str | None = None
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    def view(self) -> dict[str, Any]:
        result = None
        if self.status != "pending":
            result = {"text": self.status, "message": self.message, "trust": "external_untrusted"}
        return {"id": self.id, "tool": self.tool, "status": self.status, "result": result}


@dataclass(eq=False)
class _Device:
    device_id: str
    undelivered: dict[str, _Invocation] = field(default_factory=dict)
    woken: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self) -> list[_Invocation]:
        taken = list(itertools.islice(self.undelivered.values(), MAX_FETCH))
        for invocation in taken:
            del self.undelivered[invocation.id]
        return taken


class Floor:
    """The in-memory state: tokens, devices by tool name, and open invocations."""

    def __init__(self) -> None:
        self.agents: set[str] = set()
        self.devices: dict[str, _Device] = {}  # by device token
        self.tools: dict[str, _Device] = {}
        self.invocations: dict[str, _Invocation] = {}
        self._ids = itertools.count(1)

    def add_pair(self) -> dict[str, str]:
        n = len(self.tools) + 1
        device = _Device(f"floor-{n}")
        agent, token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        tool = f"device__floor_{n}__set_light"
        self.agents.add(agent)
        self.devices[token] = device
        self.tools[tool] = device
        return {"agent_token": agent, "device_token": token, "tool": tool}

    def new_id(self) -> str:
        return f"inv_{next(self._ids)}"

    def invoke(self, tool: str, arguments: Any, invocation_id: str | None = None) -> _Invocation:
        device = self.tools[tool]
        invocation = _Invocation(invocation_id or self.new_id(), tool, device, arguments)
        self.invocations[invocation.id] = invocation
        device.undelivered[invocation.id] = invocation
        device.woken.set()
        return invocation

    def answer(self, device: _Device, invocation_id: str, status: str, message: str | None) -> int:
        invocation = self.invocations.get(invocation_id)
        if invocation is None or invocation.device is not device:
            return 404
        if invocation.status != "pending":
            return 409
        invocation.status, invocation.message = status, message
        device.undelivered.pop(invocation_id, None)
        return 200

    def settle(self, invocation_id: str) -> None:
        """Wake the agent waiting on an answered invocation (after the answer is durable, if it must be)."""
        invocation = self.invocations.get(invocation_id)
        if invocation is not None:
            invocation.answered.set()


def _token(headers: Any) -> str:
    scheme, _, token = str(headers.get("authorization", "")).partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _error(status: int, code: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": code}}, status_code=status)


def create_app(durable: Durable | None = None) -> Starlette:
    floor = Floor()
    store = durable

    async def ready(_: Request) -> Response:
        return JSONResponse({"status": "ready"})

    async def pairs(request: Request) -> Response:
        count = int((await request.json()).get("count", 1))
        return JSONResponse({"pairs": [floor.add_pair() for _ in range(max(1, min(count, 100_000)))]})

    async def invoke(request: Request) -> Response:
        if _token(request.headers) not in floor.agents:
            return _error(401, "unauthenticated")
        body = await request.json()
        if body.get("tool") not in floor.tools:
            return JSONResponse({"id": "", "tool": body.get("tool"), "status": "refused", "result": None})
        invocation_id = floor.new_id()
        if store is not None:  # durable before the device can see it
            await store.invoked(invocation_id, body["tool"], body.get("arguments", {}))
        invocation = floor.invoke(body["tool"], body.get("arguments", {}), invocation_id)
        wait = min(float(body.get("wait") or 0), MAX_WAIT)
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(invocation.answered.wait(), wait)
        if invocation.status != "pending":
            del floor.invocations[invocation.id]
        return JSONResponse(invocation.view())

    async def pending(request: Request) -> Response:
        device = floor.devices.get(_token(request.headers))
        if device is None:
            return _error(401, "unauthenticated")
        wait = min(float(request.query_params.get("wait", 0)), 60.0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        waited = False
        while True:
            # A poll whose client has gone (a load client of an earlier turn, ended while its poll was
            # held) takes nothing: what it took would be lost, and the call with it. Asked after a
            # wait only, which is once a call in a round trip.
            if waited and await request.is_disconnected():
                return Response(status_code=204)
            device.woken.clear()
            found = device.take()
            left = deadline - loop.time()
            if found or left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(device.woken.wait(), left)
            waited = True
        views = [{"id": i.id, "tool": i.tool, "arguments": i.arguments} for i in found]
        return JSONResponse({"invocations": views})

    async def result(request: Request) -> Response:
        device = floor.devices.get(_token(request.headers))
        if device is None:
            return _error(401, "unauthenticated")
        body = await request.json()
        invocation_id = request.path_params["invocation_id"]
        status = floor.answer(device, invocation_id, str(body.get("status")), body.get("message"))
        if status != 200:
            return _error(status, "not_found" if status == 404 else "conflict")
        if store is not None:
            await store.answered(invocation_id, str(body.get("status")), body.get("message"))
        floor.settle(invocation_id)
        return JSONResponse({"id": invocation_id, "status": body.get("status")})

    async def connect(ws: WebSocket) -> None:
        await ws.accept()
        device = floor.devices.get(_token(ws.headers))
        if device is None:
            await ws.close(code=4401)
            return

        async def send() -> None:
            while True:
                device.woken.clear()
                for invocation in device.take():
                    frame = {
                        "type": "device:invoke",
                        "callId": invocation.id,
                        "tool": invocation.tool,
                        "input": invocation.arguments,
                    }
                    await ws.send_text(json.dumps(frame))
                await device.woken.wait()

        async def receive() -> None:
            while True:
                try:
                    frame = json.loads(await ws.receive_text())
                except (WebSocketDisconnect, RuntimeError):
                    return
                if isinstance(frame, dict) and frame.get("type") == "device:result":
                    call, status = str(frame.get("callId")), str(frame.get("status"))
                    code = floor.answer(device, call, status, frame.get("message"))
                    if code == 200:
                        if store is not None:
                            await store.answered(call, status, frame.get("message"))
                        floor.settle(call)
                    acked = {200: "accepted", 409: "duplicate"}.get(code, "unknown")
                    await ws.send_text(json.dumps({"type": "device:ack", "callId": call, "status": acked}))

        tasks = {asyncio.create_task(send()), asyncio.create_task(receive())}
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if store is not None:
            await store.open()
        try:
            yield
        finally:
            if store is not None:
                await store.close()

    return Starlette(
        lifespan=lifespan,
        routes=[
            Route("/readyz", ready),
            Route("/floor/pairs", pairs, methods=["POST"]),
            Route("/v1/invocations", invoke, methods=["POST"]),
            Route("/v1/device/invocations", pending),
            Route("/v1/device/invocations/{invocation_id}/result", result, methods=["POST"]),
            WebSocketRoute("/v1/device/connect", connect),
        ],
    )


def main(argv: list[str] | None = None) -> None:
    """Serve the floor as ``tapgate serve`` serves tapgate: uvicorn, one worker, the same options."""
    import uvicorn

    from tapgate.cli import UVICORN_OPTIONS
    from tapgate.logs import configure_logging

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--durable", default=None, help="sqlite:PATH or a postgresql:// URL")
    args = parser.parse_args(argv)
    configure_logging("warning")
    uvicorn.run(
        create_app(open_durable(args.durable) if args.durable else None),
        host=args.host,
        port=args.port,
        workers=1,
        **UVICORN_OPTIONS,
    )


if __name__ == "__main__":
    main()
