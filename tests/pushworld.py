"""A gateway in process with its push senders pointed at the loopback fakes, and a person with devices.

The fixtures (``fakes``, ``push_http``, ``push_clock``) are in conftest.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from tapgate.adapters.push import PushRouter, RelaySender, WebPushSender
from tapgate.config import Settings
from tapgate.domain.push import OutboxItem
from tapgate.gateway import Gateway
from tests.conftest import SENDER_TIMEOUT, asgi_client, tenant_name
from tests.pushfakes import PushFakes
from tests.world import LAMP, World, bearer, device_body

SMS = {"name": "sms_send"}


def push_router(
    http: httpx.AsyncClient,
    fakes: PushFakes,
    clock: Any,
    relays: dict[str, str] | None = None,
    timeout: float = SENDER_TIMEOUT,
) -> PushRouter:
    """Web Push to the fake's endpoints, and the relay fake for ``fcm`` (or ``relays``)."""
    relay = RelaySender(
        http,
        relays or {"fcm": f"{fakes.base_url}/relay/ok"},
        fakes.accounts.relay_secret,
        clock,
        timeout=timeout,
    )
    webpush = WebPushSender(
        http,
        fakes.accounts.vapid_private_b64,
        fakes.accounts.vapid_subject,
        clock,
        https_only=False,
        hosts=(
            "127.0.0.1",
            "localhost",
        ),  # the loopback fakes: the default list names the real push services only
        timeout=timeout,
    )
    return PushRouter({"webpush": webpush}, relay)


@dataclass
class Scene:
    """ana, her agent and her devices on a gateway whose pushes go to the fakes."""

    client: httpx.AsyncClient
    world: World
    fakes: PushFakes
    sender: PushRouter
    devices: dict[str, str] = field(default_factory=dict)  # device id -> device token

    @property
    def gateway(self) -> Gateway:
        gateway: Gateway = self.client.app.state.gateway  # type: ignore[attr-defined]
        return gateway

    @property
    def agent(self) -> dict[str, str]:
        return bearer(self.world.agents["ana"])

    async def enrol(self, device_id: str, push: dict[str, str] | None, capabilities: Any = None) -> str:
        capabilities = capabilities or [SMS, LAMP]
        body = device_body(
            device_id,
            capabilities,
            grants=[c["name"] for c in capabilities],
            **({"push": push} if push else {}),
        )
        self.devices[device_id] = await self.world.enrol("ana", body)
        return self.devices[device_id]

    async def invoke(self, tool: str, arguments: dict[str, Any], **body: Any) -> dict[str, Any]:
        r = await self.client.post(
            "/v1/invocations", json={"tool": tool, "arguments": arguments, **body}, headers=self.agent
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def light(self, device_id: str = "ana-phone") -> dict[str, Any]:
        return await self.invoke(f"device__{device_id.replace('-', '_')}__set_light", {"on": True})

    async def fetch(self, device_id: str) -> list[dict[str, Any]]:
        r = await self.client.get("/v1/device/invocations", headers=bearer(self.devices[device_id]))
        assert r.status_code == 200, r.text
        return list(r.json()["invocations"])

    async def answer(self, device_id: str, invocation_id: str, status: str = "done", **body: Any) -> int:
        r = await self.client.post(
            f"/v1/device/invocations/{invocation_id}/result",
            json={"status": status, **body},
            headers=bearer(self.devices[device_id]),
        )
        return r.status_code

    async def rows(self, subject_id: str) -> list[OutboxItem]:
        async with self.gateway.store.unit_of_work(self.world.tenant) as uow:
            return list(await uow.outbox.for_subject(subject_id))

    async def audit(self) -> list[dict[str, Any]]:
        r = await self.client.get("/v1/audit?limit=1000", headers=bearer(self.world.operator))
        return list(r.json()["entries"])

    async def pushes(self) -> None:
        """Everything due now is sent and recorded (the worker also runs on its own)."""
        with anyio.fail_after(10):
            await self.gateway.send_pushes()

    async def metric(self, name: str) -> float:
        text = (await self.client.get("/metrics")).text
        values = [line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")]
        return float(values[0]) if values else 0.0


@contextlib.asynccontextmanager
async def push_scene(
    settings: Settings,
    fakes: PushFakes,
    http: httpx.AsyncClient,
    clock: Any = None,
    relays: dict[str, str] | None = None,
    phone_push: dict[str, str] | None = None,
    sender_seconds: float = SENDER_TIMEOUT,
) -> AsyncIterator[Scene]:
    """ana with her phone (sms_send and a lamp capability; its pushes go to the relay fake); each push
    sender waits ``sender_seconds`` for a reply."""
    router = push_router(http, fakes, clock or _real_clock(), relays, sender_seconds)
    async with asgi_client(settings, clock, router) as client:
        world = await World(client, tenant=tenant_name()).start()
        await world.person("ana")
        world.agents["ana"] = await world.agent("ana")
        scene = Scene(client, world, fakes, router)
        await scene.enrol("ana-phone", phone_push or {"kind": "fcm", "token": "fcm-ana-phone"})
        yield scene


def _real_clock() -> Any:
    from tapgate.adapters.clock import SystemClock

    return SystemClock()


async def arrived(fakes: PushFakes, route: str, count: int = 1, seconds: float = 5.0) -> None:
    """Wait, at most ``seconds``, until ``count`` requests reached the fakes' ``route``."""
    reached = await anyio.to_thread.run_sync(fakes.wait_seen, route, count, seconds)
    assert reached, f"{fakes.hits[route]} of {count} requests reached {route} within {seconds} s"
