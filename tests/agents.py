"""What the agent-side tests share: a person's home on a live gateway, and devices that answer their
calls over HTTP long-poll the way a small device script would."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx
import httpx2
import mcp
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.live import new_tenant
from tests.world import LAMP, THERMOMETER, bearer, device_body

DOOR = {"name": "unlock", "kind": "actuator", "description": "Unlock the front door."}
KETTLE = {"name": "boil", "kind": "actuator", "description": "Boil the water in the kettle."}
PHONE = [{"name": "sms_send"}, {"name": "phone_actions"}]

# Rules the live gateways of these tests run with: a door that stays locked, a kettle that asks first.
POLICIES = """version: 1
policies:
  - name: doors-stay-locked
    action: device_use
    condition: "capability equals unlock"
    decision: block
    message: "Doors stay locked from here"
  - name: kettle-needs-a-yes
    action: device_use
    condition: "capability equals boil"
    decision: require_approval
    message: "The kettle needs a yes"
"""


@dataclass
class Home:
    """A fresh tenant on a live gateway: ana (user and agent tokens) and her devices.

    desk-lamp (set_light granted; read_temperature declared, not granted) and kettle answer through
    ``answering()``; hall-lamp never answers; front-door is blocked by policy; ana-phone has sms_send.
    """

    url: str
    client: httpx.AsyncClient
    operator: str = ""
    user: str = ""
    agent: str = ""
    devices: dict[str, str] = field(default_factory=dict)

    async def build(self, database_url: str) -> Home:
        self.operator = await new_tenant(database_url)
        r = await self.client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(self.operator))
        assert r.status_code == 201, r.text
        self.user = await self.token("user")
        self.agent = await self.token("agent", agent_id="assistant")
        await self.enrol("desk-lamp", [LAMP, THERMOMETER], ["set_light"])
        await self.enrol("hall-lamp", [LAMP], ["set_light"])
        await self.enrol("front-door", [DOOR], ["unlock"])
        await self.enrol("kettle", [KETTLE], ["boil"])
        await self.enrol("ana-phone", PHONE, ["sms_send", "phone_actions"])
        return self

    async def token(self, kind: str, **body: Any) -> str:
        r = await self.client.post(
            "/v1/users/ana/tokens", json={"kind": kind, **body}, headers=bearer(self.operator)
        )
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    async def enrol(self, device_id: str, capabilities: list[dict[str, Any]], grants: list[str]) -> None:
        body = device_body(device_id, capabilities, grants=grants)
        r = await self.client.post("/v1/users/ana/devices", json=body, headers=bearer(self.operator))
        assert r.status_code == 201, r.text
        self.devices[device_id] = str(r.json()["device_token"])

    async def grant(self, device_id: str, capability: str, granted: bool) -> None:
        r = await self.client.put(
            f"/v1/users/ana/devices/{device_id}/grants",
            json={"grants": {capability: granted}},
            headers=bearer(self.user),
        )
        assert r.status_code == 200, r.text

    async def approve_the_waiting_card(self, binding_code: str) -> None:
        """The person opens the inbox, checks the card's code against the conversation, and approves."""
        r = await self.client.get("/v1/inbox", headers=bearer(self.user))
        [card] = [a for a in r.json()["approvals"] if a["binding_code"] == binding_code]
        r = await self.client.post(
            f"/v1/approvals/{card['id']}", json={"decision": "approved"}, headers=bearer(self.user)
        )
        assert r.status_code == 200, r.text

    @contextlib.asynccontextmanager
    async def answering(self, *device_ids: str) -> AsyncIterator[list[dict[str, Any]]]:
        """Devices that long-poll their pending calls and answer each ``done`` with a message; yields
        every call they received, in order."""
        seen: list[dict[str, Any]] = []
        stopping = anyio.Event()
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as device_http:

            async def loop(device_id: str) -> None:
                token = self.devices[device_id]
                while not stopping.is_set():
                    # Short polls, each let run to its end when the devices stop: a poll abandoned
                    # mid-wait would still be handed the next call, and the gateway hands a call again
                    # only after redelivery_seconds.
                    r = await device_http.get("/v1/device/invocations?wait=3", headers=bearer(token))
                    assert r.status_code == 200, r.text
                    for call in r.json()["invocations"]:
                        seen.append({"device": device_id, **call})
                        answer = {"status": "done", "message": f"{call['capability']} done"}
                        await device_http.post(
                            f"/v1/device/invocations/{call['id']}/result", json=answer, headers=bearer(token)
                        )

            async with anyio.create_task_group() as tg:
                for device_id in device_ids:
                    tg.start_soon(loop, device_id)
                try:
                    yield seen
                finally:
                    stopping.set()  # each loop ends after its poll in flight, answering what it got


@contextlib.asynccontextmanager
async def mcp_over_http(url: str, token: str, mode: str = "auto", **client: Any) -> AsyncIterator[mcp.Client]:
    """The official MCP client on ``/mcp`` with the agent's token on every request."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        mcp.Client(streamable_http_client(url, http_client=http), mode=mode, **client) as session,
    ):
        yield session


def mcp_over_stdio(
    gateway_url: str, token: str, errlog: TextIO, *extra: str, mode: str = "auto", **client: Any
) -> mcp.Client:
    """The official MCP client starting ``tapgate mcp`` as its subprocess, as a desktop assistant does."""
    params = mcp.StdioServerParameters(
        command=sys.executable,
        args=["-m", "tapgate", "mcp", "--url", gateway_url, "--token", token, *extra],
        env=dict(os.environ),
    )
    return mcp.Client(stdio_client(params, errlog=errlog), mode=mode, **client)


def text_of(result: mcp.types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, mcp.types.TextContent)
    return content.text


def examples_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "examples"
