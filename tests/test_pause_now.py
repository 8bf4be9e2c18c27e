"""Pause all agents means now: calls waiting for the person or not yet taken by a device are refused at
once, their approvals close, and a call a device already has is left to it; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.migrate import migrate
from tapgate.config import Settings
from tapgate.domain.approvals import sign_decision, signed_text
from tapgate.domain.console import ALL_AGENTS
from tapgate.services.console import PAUSED_UNTIL
from tests.conftest import asgi_client, blocking, tenant_name
from tests.live import Server, new_tenant, tapgate, write_config
from tests.world import LAMP, Key, World, bearer, device_body, new_key

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
DOOR = LAMP | {"name": "unlock_door", "description": "Unlock the front door.", "confirm": True}
DOOR_TOOL = "device__front_door__unlock_door"
LAMP_TOOL = "device__desk_lamp__set_light"
FORM = "application/x-www-form-urlencoded"
PAUSED = "[deny] paused by the person"


class Home:
    """ana, signed in to her console, with a paired phone, a door that asks her first and a lamp that
    does not, and her agent."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.phone_key: Key = new_key("p256")
        self.tokens: dict[str, str] = {}
        self.csrf = ""

    @property
    def client(self) -> httpx.AsyncClient:
        return self.world.client

    async def build(self) -> Home:
        w = self.world
        await w.person("ana")
        self.tokens["agent"] = await w.agent("ana")
        self.tokens["phone"] = await w.enrol("ana", device_body("ana-phone", [], self.phone_key))
        self.tokens["door"] = await w.enrol("ana", device_body("front-door", [DOOR], grants=["unlock_door"]))
        self.tokens["lamp"] = await w.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
        gateway = self.client.app.state.gateway  # type: ignore[attr-defined]
        url: str = await gateway.console_link(await gateway.authenticate(w.operator), "ana")
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        r = await self.client.post(path, content=b"", headers=self._form_headers())
        assert r.status_code == 303, r.text
        page = await self.client.get("/console/agents")
        marker = 'name="csrf" value="'
        self.csrf = page.text.split(marker, 1)[1].split('"', 1)[0]
        return self

    def _form_headers(self) -> dict[str, str]:
        return {"content-type": FORM, "origin": "http://tapgate.test", "sec-fetch-site": "same-origin"}

    async def pause(self, paused: bool = True) -> None:
        body = httpx.QueryParams({"paused": "true" if paused else "false", "csrf": self.csrf})
        r = await self.client.post(
            "/console/agents/pause", content=str(body).encode(), headers=self._form_headers()
        )
        assert r.status_code == 303, r.text

    async def call(self, tool: str) -> dict[str, Any]:
        r = await self.client.post(
            "/v1/invocations",
            json={"tool": tool, "arguments": {"on": True}},
            headers=bearer(self.tokens["agent"]),
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def view(self, invocation_id: str) -> dict[str, Any]:
        r = await self.client.get(f"/v1/invocations/{invocation_id}", headers=bearer(self.tokens["agent"]))
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def inbox(self) -> list[dict[str, Any]]:
        r = await self.client.get("/v1/inbox", headers=bearer(self.tokens["phone"]))
        assert r.status_code == 200, r.text
        return list(r.json()["approvals"])

    async def approve(self, approval: dict[str, Any]) -> httpx.Response:
        sign = approval["sign"]
        payload = signed_text(
            sign["format"],
            approval["id"],
            "approved",
            approval["kind"],
            approval["subject"],
            sign["action_sha256"],
            sign["challenge"],
            sign["expires_at"],
        )
        signature = sign_decision(self.phone_key.private, payload)
        return await self.client.post(
            f"/v1/approvals/{approval['id']}",
            json={"decision": "approved", "signature": signature},
            headers=bearer(self.tokens["phone"]),
        )

    async def taken_by(self, device: str) -> list[str]:
        """What the device's fetch of pending calls hands it now."""
        r = await self.client.get("/v1/device/invocations", headers=bearer(self.tokens[device]))
        assert r.status_code == 200, r.text
        return [c["id"] for c in r.json()["invocations"]]

    async def journal(self) -> list[dict[str, Any]]:
        r = await self.client.get("/v1/audit?limit=1000", headers=bearer(self.world.operator))
        assert r.status_code == 200, r.text
        return list(r.json()["entries"])


@contextlib.asynccontextmanager
async def _home(engine: str, request: pytest.FixtureRequest, clock: FrozenClock) -> AsyncIterator[Home]:
    url = (
        request.getfixturevalue("sqlite_url")
        if engine == "sqlite"
        else request.getfixturevalue("postgres").app_url
    )
    settings = Settings(database_url=url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(settings, clock) as client:
        yield await Home(await World(client, tenant=tenant_name()).start()).build()


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_call_waiting_for_approval_is_refused_by_pause_and_a_signed_yes_after_it_runs_nothing(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        call = await home.call(DOOR_TOOL)
        assert call["status"] == "awaiting_approval"
        [approval] = await home.inbox()
        await home.pause()
        refused = await home.view(call["id"])
        assert (refused["status"], refused["reason"]) == ("refused", PAUSED)
        assert await home.inbox() == []  # the card is gone from every device
        late = await home.approve(approval)
        assert late.status_code == 409, late.text
        assert late.json()["error"]["code"] == "conflict"
        assert (await home.view(call["id"]))["status"] == "refused"
        assert await home.taken_by("door") == []  # never delivered
        entries = await home.journal()
        assert [e["outcome"] for e in entries if e["action"] == "invocation.refused"] == ["refused"]
        assert not [e for e in entries if e["action"] == "approval.decided"]
        assert [e["data"]["refused"] for e in entries if e["action"] == "agents.paused"] == [1]
        # the agent is told, on its event stream, as for any other ending
        gateway = home.client.app.state.gateway  # type: ignore[attr-defined]
        stream = gateway.events(await gateway.authenticate(home.tokens["agent"]), 0, idle=0.01)
        resolved = []
        async for event in stream:
            if event is None:
                break
            if event.type == "invocation.resolved":
                resolved.append(event.data)
        assert [(e["invocation_id"], e["status"]) for e in resolved] == [(call["id"], "refused")]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_pending_call_no_device_has_taken_is_refused_by_pause_and_never_reaches_the_device(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        call = await home.call(LAMP_TOOL)
        assert call["status"] == "pending"
        await home.pause()
        refused = await home.view(call["id"])
        assert (refused["status"], refused["reason"]) == ("refused", PAUSED)
        assert await home.taken_by("lamp") == []
        answer = await home.client.post(
            f"/v1/device/invocations/{call['id']}/result",
            json={"status": "done"},
            headers=bearer(home.tokens["lamp"]),
        )
        assert answer.status_code == 409, answer.text


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_call_already_handed_to_its_device_is_left_to_it_by_pause(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        gateway = home.client.app.state.gateway  # type: ignore[attr-defined]
        gateway.hands.flush_seconds = 3600  # the mark is only this process's until the pause writes it
        call = await home.call(LAMP_TOOL)
        assert await home.taken_by("lamp") == [call["id"]]
        await home.pause()
        assert (await home.view(call["id"]))["status"] == "pending"
        answer = await home.client.post(
            f"/v1/device/invocations/{call['id']}/result",
            json={"status": "done"},
            headers=bearer(home.tokens["lamp"]),
        )
        assert answer.status_code == 200, answer.text
        assert (await home.view(call["id"]))["status"] == "done"
        assert (await home.call(LAMP_TOOL))["reason"] == PAUSED  # a new call is refused


@pytest.mark.parametrize("engine", ENGINES)
async def test_pause_and_a_signed_yes_at_the_same_moment_never_both_win(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        for trial in range(6):
            await home.pause(False)
            call = await home.call(DOOR_TOOL)
            [approval] = await home.inbox()
            if trial % 2:  # each of the two set off first in turn
                decided, _ = await asyncio.gather(home.approve(approval), home.pause())
            else:
                _, decided = await asyncio.gather(home.pause(), home.approve(approval))
            assert decided.status_code in (200, 409), (trial, decided.text)
            ended = await home.view(call["id"])
            # approved first: the call went on before the pause, which then found it untaken and refused
            # it; paused first: the approval was closed and the yes came too late. Never delivered.
            assert (ended["status"], ended["reason"]) == ("refused", PAUSED), trial
            assert await home.taken_by("door") == [], trial
        entries = await home.journal()
        refused = [e["subject"] for e in entries if e["action"] == "invocation.refused"]
        assert len(refused) == len(set(refused)) == 6


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_yes_to_a_call_asked_while_the_pause_committed_still_runs_nothing(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        call = await home.call(DOOR_TOOL)
        [approval] = await home.inbox()
        # The pause row as a pause that committed between the call's check and its write leaves it: the
        # approval still open.
        gateway = home.client.app.state.gateway  # type: ignore[attr-defined]
        async with gateway.ctx.store.unit_of_work(home.world.tenant) as uow:
            await uow.pauses.pause("ana", ALL_AGENTS, PAUSED_UNTIL)
        r = await home.approve(approval)
        assert r.status_code == 200, r.text
        ended = await home.view(call["id"])
        assert (ended["status"], ended["reason"]) == ("refused", PAUSED)
        assert await home.taken_by("door") == []


def test_a_call_its_device_took_over_a_live_link_is_left_to_it_by_pause(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tapgate.db'}"
    blocking(migrate(url))
    config = write_config(tmp_path, url)
    server = Server(config).start()
    try:
        blocking(_over_a_live_link(server, url, config))
    finally:
        server.stop()


async def _over_a_live_link(server: Server, url: str, config: Path) -> None:
    tenant = tenant_name()
    operator = bearer(await new_tenant(url, tenant))
    async with httpx.AsyncClient(base_url=server.url, timeout=15) as client:
        assert (await client.post("/v1/users", json={"user_id": "ana"}, headers=operator)).status_code == 201
        r = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=operator)
        agent = bearer(r.json()["token"])
        body = device_body("desk-lamp", [LAMP], grants=["set_light"])
        lamp = bearer(
            (await client.post("/v1/users/ana/devices", json=body, headers=operator)).json()["device_token"]
        )
        ws_url = server.url.replace("http", "ws") + "/v1/device/connect"
        async with websockets.connect(ws_url, additional_headers=lamp, compression=None) as link:
            r = await client.post(
                "/v1/invocations", json={"tool": LAMP_TOOL, "arguments": {"on": True}}, headers=agent
            )
            call = r.json()["id"]
            async with asyncio.timeout(10):
                while json.loads(await link.recv())["type"] != "device:invoke":
                    pass
            made = await asyncio.to_thread(
                tapgate,
                "console",
                "link",
                "--tenant",
                tenant,
                "--user",
                "ana",
                "--url",
                server.url,
                "--config",
                str(config),
            )
            assert made.returncode == 0, made.stderr
            path = "/" + made.stdout.strip().split("://", 1)[1].split("/", 1)[1]
            headers = {"content-type": FORM, "origin": server.url, "sec-fetch-site": "same-origin"}
            assert (await client.post(path, headers=headers)).status_code == 303
            page = (await client.get("/console/agents")).text
            csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            form = str(httpx.QueryParams({"paused": "true", "csrf": csrf})).encode()
            assert (
                await client.post("/console/agents/pause", content=form, headers=headers)
            ).status_code == 303
            view = await client.get(f"/v1/invocations/{call}", headers=agent)
            assert view.json()["status"] == "pending"  # the lamp has it: left to the lamp
            await link.send(json.dumps({"type": "device:result", "callId": call, "status": "done"}))
            async with asyncio.timeout(10):
                while (frame := json.loads(await link.recv()))["type"] != "device:ack":
                    pass
            assert frame["status"] == "accepted"
            assert (await client.get(f"/v1/invocations/{call}", headers=agent)).json()["status"] == "done"
