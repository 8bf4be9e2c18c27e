"""A scripted OpenAI-compatible chat endpoint on loopback (Starlette on uvicorn): it asks for one tool
call, then answers in words once it has read that call's result, and checks what it was sent."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class _Quiet(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the test process keeps its own signal handlers
        yield


@dataclass
class ScriptedModel:
    """Turn 1: expects ``tool`` among the tools and calls it with ``arguments``. Turn 2: expects the
    tool's result to contain ``expect_in_result`` and answers ``final``. Anything else is a problem,
    answered 400, so the agent under test fails loudly."""

    tool: str
    arguments: dict[str, Any]
    expect_in_result: str
    final: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    async def _completions(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        offered = [t["function"]["name"] for t in body.get("tools", []) if t.get("type") == "function"]
        if self.tool not in offered:
            return self._problem(f"the tools did not include {self.tool}: {offered}")
        last = body["messages"][-1]
        if last["role"] == "user":
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": self.tool, "arguments": json.dumps(self.arguments)},
            }
            return self._choice({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
        if last["role"] == "tool" and last.get("tool_call_id") == "call_1":
            if self.expect_in_result not in last["content"]:
                return self._problem(f"the tool result was {last['content']!r}")
            return self._choice({"role": "assistant", "content": self.final}, "stop")
        return self._problem(f"unexpected last message {last}")

    def _problem(self, text: str) -> JSONResponse:
        self.problems.append(text)
        return JSONResponse({"error": {"message": text}}, status_code=400)

    def _choice(self, message: dict[str, Any], finish: str) -> JSONResponse:
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "model": "scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
        )

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Serve on a loopback port; yields the OpenAI base URL (``…/v1``)."""
        app = Starlette(routes=[Route("/v1/chat/completions", self._completions, methods=["POST"])])
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()  # connections queue from now on, before uvicorn takes over the socket
        port = sock.getsockname()[1]
        server = _Quiet(uvicorn.Config(app, log_level="warning", lifespan="off"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            try:
                yield f"http://127.0.0.1:{port}/v1"
            finally:
                server.should_exit = True
        sock.close()
