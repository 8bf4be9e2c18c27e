"""What each measurement needs on its server before it starts: a tenant, people, agents, devices.

Small sets go through the HTTP API as an operator would make them. The 10,000 idle devices are written
through the store's ports in a few transactions before their server starts (10,000 enrolments over HTTP
would take minutes on SQLite); they are then connected through the real HTTP and WebSocket paths.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from dataclasses import dataclass
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tapgate.config import Settings

LAMP: dict[str, Any] = {
    "name": "set_light",
    "kind": "actuator",
    "description": "Turn the lamp on or off.",
    "params": {"on": {"type": "boolean", "required": True, "description": "true for on"}},
    "confirm": False,
}
DOOR: dict[str, Any] = LAMP | {
    "name": "unlock_door",
    "description": "Unlock the front door.",
    "confirm": True,
}
CONFIRMED_LAMP: dict[str, Any] = LAMP | {"confirm": True}  # asks every call, unless a mandate covers it
MANDATE_CALLS = 1000  # the most one mandate allows
DEVICES_PER_USER = 10  # the default device limit: the bench's people own no more than real ones may


@dataclass(frozen=True)
class Pair:
    """An agent and the one device it calls: the tool name is the device's lamp."""

    agent_token: str
    device_token: str
    tool: str

    def as_json(self) -> dict[str, str]:
        return {"agent_token": self.agent_token, "device_token": self.device_token, "tool": self.tool}


@dataclass(frozen=True)
class Tenant:
    tenant_id: str
    operator_token: str


def public_key(key: ec.EllipticCurvePrivateKey) -> str:
    raw = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(raw).decode()


def device_body(
    device_id: str, capabilities: list[dict[str, Any]], key: str, push: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "device_id": device_id,
        "name": device_id.replace("-", " ").capitalize(),
        "kind": "phone",
        "alg": "p256",
        "public_key": key,
        "capabilities": capabilities,
        "grants": [c["name"] for c in capabilities],
    }
    if push:
        body["push"] = {"kind": "fcm", "token": "bench"}
    return body


async def new_tenant(database_url: str) -> Tenant:
    """A fresh tenant made beside the server, as ``tapgate tenant create`` makes one."""
    from tapgate.bootstrap import build_gateway

    gateway = build_gateway(Settings(database_url=database_url))
    try:
        tenant_id = f"bench-{secrets.token_hex(3)}"
        return Tenant(tenant_id, (await gateway.create_tenant(tenant_id)).token)
    finally:
        await gateway.close()


class Operator:
    """The tenant's operator over HTTP."""

    def __init__(self, client: httpx.AsyncClient, token: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"}

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = await self.client.post(path, json=body, headers=self.headers)
        if r.status_code != 201:
            raise RuntimeError(f"POST {path} answered {r.status_code}: {r.text[:300]}")
        answer: dict[str, Any] = r.json()
        return answer

    async def user(self, user_id: str) -> None:
        await self._post("/v1/users", {"user_id": user_id})

    async def token(self, user_id: str, kind: str) -> str:
        body: dict[str, Any] = {"kind": kind} | ({"agent_id": "bench"} if kind == "agent" else {})
        return str((await self._post(f"/v1/users/{user_id}/tokens", body))["token"])

    async def enrol(self, user_id: str, body: dict[str, Any]) -> str:
        return str((await self._post(f"/v1/users/{user_id}/devices", body))["device_token"])


async def tapgate_pairs(url: str, tenant: Tenant, count: int, concurrency: int = 8) -> list[Pair]:
    """``count`` people, each with an agent token and one lamp, through the HTTP API."""
    key = public_key(ec.generate_private_key(ec.SECP256R1()))
    gate = asyncio.Semaphore(concurrency)

    async def one(operator: Operator, n: int) -> Pair:
        async with gate:
            user = f"person-{n}"
            await operator.user(user)
            agent = await operator.token(user, "agent")
            device = await operator.enrol(user, device_body("lamp", [LAMP], key))
            return Pair(agent, device, "device__lamp__set_light")

    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        operator = Operator(client, tenant.operator_token)
        return list(await asyncio.gather(*(one(operator, n) for n in range(count))))


async def _sign_open_cards(client: httpx.AsyncClient, phone: str, key: ec.EllipticCurvePrivateKey) -> int:
    """The phone signs ``approved`` on every card in its inbox, as the person would; how many."""
    from tapgate.domain.approvals import sign_decision, signed_text

    r = await client.get("/v1/inbox", headers={"Authorization": f"Bearer {phone}"})
    r.raise_for_status()
    signed = 0
    for approval in r.json()["approvals"]:
        sign = approval["sign"]
        text = signed_text(
            sign["format"],
            approval["id"],
            "approved",
            approval["kind"],
            approval["subject"],
            sign["action_sha256"],
            sign["challenge"],
            sign["expires_at"],
        )
        body = {"decision": "approved", "device_id": "phone", "signature": sign_decision(key, text)}
        answer = await client.post(
            f"/v1/approvals/{approval['id']}", json=body, headers={"Authorization": f"Bearer {phone}"}
        )
        if answer.status_code != 200:
            raise RuntimeError(f"a card was not signed: {answer.status_code} {answer.text[:300]}")
        signed += 1
    return signed


async def mandated_pair(url: str, tenant: Tenant, calls: int) -> Pair:
    """A person whose lamp asks before every call (``confirm``), an agent, and enough signed standing
    mandates (1,000 calls each, the most one allows) to cover ``calls`` of the agent's calls to it: every
    call goes through a mandate instead of a card. The mandates are asked over HTTP by the agent and
    signed by the person's approver phone, as a person would."""
    key = ec.generate_private_key(ec.SECP256R1())
    tool = "device__lamp__set_light"
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        operator = Operator(client, tenant.operator_token)
        user = "mandator"
        await operator.user(user)
        agent = await operator.token(user, "agent")
        device = await operator.enrol(user, device_body("lamp", [CONFIRMED_LAMP], public_key(key)))
        phone = await operator.enrol(user, device_body("phone", [{"name": "approvals"}], public_key(key)))
        mandates = max(1, -(-calls // MANDATE_CALLS))
        body = {
            "tools": [tool],
            "constraints": {"on": {"one_of": [True, False]}},
            "max_calls": MANDATE_CALLS,
            "expires_in_seconds": 24 * 3600,
            "purpose": "the bench's covered round trips",
        }
        for _ in range(mandates):
            r = await client.post("/v1/mandates", json=body, headers={"Authorization": f"Bearer {agent}"})
            if r.status_code != 202:
                raise RuntimeError(f"a mandate was not asked: {r.status_code} {r.text[:300]}")
        signed = await _sign_open_cards(client, phone, key)
        if signed != mandates:
            raise RuntimeError(f"{signed} mandate cards signed of the {mandates} asked")
    return Pair(agent, device, tool)


async def floor_pairs(url: str, count: int) -> list[Pair]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        r = await client.post("/floor/pairs", json={"count": count})
        r.raise_for_status()
        return [Pair(p["agent_token"], p["device_token"], p["tool"]) for p in r.json()["pairs"]]


async def tapgate_devices(url: str, tenant: Tenant, count: int, concurrency: int = 8) -> list[str]:
    """``count`` phones enrolled over HTTP, ten to a person; their device tokens."""
    key = public_key(ec.generate_private_key(ec.SECP256R1()))
    users = (count + DEVICES_PER_USER - 1) // DEVICES_PER_USER
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        operator = Operator(client, tenant.operator_token)

        async def person(u: int) -> list[str]:
            async with gate:
                await operator.user(f"texter-{u}")
                n = min(DEVICES_PER_USER, count - u * DEVICES_PER_USER)
                return [
                    await operator.enrol(f"texter-{u}", device_body(f"phone-{i}", [], key)) for i in range(n)
                ]

        return [
            token for tokens in await asyncio.gather(*(person(u) for u in range(users))) for token in tokens
        ]


async def bulk_devices(database_url: str, tenant: Tenant, count: int, batch: int = 1000) -> list[str]:
    """``count`` active devices (ten to a person, each with a granted lamp) written through the store's
    ports, ``batch`` to a transaction; their device tokens."""
    from tapgate.adapters.clock import SystemClock
    from tapgate.adapters.store.sql import open_sql_store
    from tapgate.domain.accounts import Credential, User
    from tapgate.domain.devices import DeviceStatus
    from tapgate.domain.principals import SCOPES_BY_KIND, TokenKind
    from tapgate.domain.tokens import issue_token
    from tapgate.services.devices import new_device

    key = public_key(ec.generate_private_key(ec.SECP256R1()))
    now = SystemClock().now()
    store = open_sql_store(database_url)
    tokens: list[str] = []
    try:
        for first in range(0, count, batch):
            async with store.unit_of_work(tenant.tenant_id) as uow:
                for n in range(first, min(first + batch, count)):
                    user_id = f"idle-{n // DEVICES_PER_USER}"
                    if n % DEVICES_PER_USER == 0:
                        await uow.users.add(User(tenant.tenant_id, user_id, user_id, now))
                    body = device_body(f"phone-{n % DEVICES_PER_USER}", [LAMP], key)
                    device = new_device(tenant.tenant_id, user_id, body, DeviceStatus.ACTIVE, now)
                    issued = issue_token(TokenKind.DEVICE, tenant.tenant_id)
                    await uow.devices.add(device)
                    await uow.credentials.add(
                        Credential(
                            tenant.tenant_id,
                            issued.credential_id,
                            TokenKind.DEVICE,
                            issued.secret_hash,
                            SCOPES_BY_KIND[TokenKind.DEVICE],
                            now,
                            user_id=user_id,
                            device_uid=device.device_uid,
                        )
                    )
                    tokens.append(issued.token)
    finally:
        await store.close()
    return tokens


@dataclass(frozen=True)
class Approvals:
    """Open approvals for the decision row: each with the approver phone's token and signed body."""

    decisions: list[list[str]]  # [approval id, device token, JSON body]
    setup_seconds: float


async def open_approvals(url: str, tenant: Tenant, count: int, concurrency: int = 8) -> Approvals:
    """``count`` calls to a confirm-on-every-call door, each waiting on an approval, and every approval
    signed ``approved`` by the person's phone key (signing is the phone's work, done before timing)."""
    import json
    import time

    from tapgate.domain.approvals import sign_decision, signed_text

    started = time.monotonic()
    phone_key = ec.generate_private_key(ec.SECP256R1())
    people = max(1, (count + 499) // 500)  # at most 500 open approvals per person
    decisions: list[list[str]] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        operator = Operator(client, tenant.operator_token)
        for p in range(people):
            user = f"approver-{p}"
            await operator.user(user)
            agent = await operator.token(user, "agent")
            await operator.enrol(user, device_body("door", [DOOR], public_key(phone_key)))
            # The person's phone approves for them: it declares approvals, and is granted it.
            approver = [{"name": "approvals"}]
            phone = await operator.enrol(user, device_body("phone", approver, public_key(phone_key)))
            calls = min(500, count - p * 500)
            gate = asyncio.Semaphore(concurrency)
            body = {"tool": "device__door__unlock_door", "arguments": {"on": True}}

            async def ask(
                agent: str = agent, body: dict[str, Any] = body, gate: asyncio.Semaphore = gate
            ) -> None:
                async with gate:
                    r = await client.post(
                        "/v1/invocations", json=body, headers={"Authorization": f"Bearer {agent}"}
                    )
                    if r.status_code != 200 or r.json().get("status") != "awaiting_approval":
                        raise RuntimeError(f"an approval did not open: {r.status_code} {r.text[:300]}")

            await asyncio.gather(*(ask() for _ in range(calls)))
            r = await client.get("/v1/inbox", headers={"Authorization": f"Bearer {phone}"})
            r.raise_for_status()
            for approval in r.json()["approvals"]:
                sign = approval["sign"]
                text = signed_text(
                    sign["format"],
                    approval["id"],
                    "approved",
                    approval["kind"],
                    approval["subject"],
                    sign["action_sha256"],
                    sign["challenge"],
                    sign["expires_at"],
                )
                signature = sign_decision(phone_key, text)
                decision = {"decision": "approved", "device_id": "phone", "signature": signature}
                decisions.append([approval["id"], phone, json.dumps(decision)])
    return Approvals(decisions, time.monotonic() - started)
