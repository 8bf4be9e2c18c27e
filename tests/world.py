"""Building blocks for tests that drive the HTTP API: tenants, people, tokens, device keys, manifests."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

LAMP = {
    "name": "set_light",
    "kind": "actuator",
    "description": "Turn the lamp on or off and set its brightness.",
    "params": {
        "on": {"type": "boolean", "required": True, "description": "true for on"},
        "brightness": {"type": "number", "description": "0-100"},
        "scene": {"type": "string", "enum": ["warm", "cold"]},
    },
    "confirm": False,
}
APPROVALS = {"name": "approvals"}  # the built-in that makes a device an approver
THERMOMETER = {"name": "read_temperature", "kind": "sensor", "description": "The room's temperature in °C."}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Key:
    alg: str
    private: Any
    public_b64: str


def new_key(alg: str = "p256") -> Key:
    if alg == "ed25519":
        private: Any = ed25519.Ed25519PrivateKey.generate()
        raw = private.public_key().public_bytes_raw()
    else:
        private = ec.generate_private_key(ec.SECP256R1())
        raw = private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    return Key(alg, private, base64.b64encode(raw).decode())


def device_body(
    device_id: str, capabilities: list[dict[str, Any]], key: Key | None = None, **extra: Any
) -> dict[str, Any]:
    key = key or new_key()
    kind = extra.get("kind", "lamp" if "lamp" in device_id else "phone")
    body = {
        "device_id": device_id,
        "name": device_id.replace("-", " ").capitalize(),
        "kind": kind,
        "alg": key.alg,
        "public_key": key.public_b64,
        "capabilities": capabilities,
    }
    if kind == "phone" and all(c.get("name") != "approvals" for c in capabilities):
        # A phone declares that it approves for its person, as the browser app and the terminal phone do.
        body["capabilities"] = [*capabilities, APPROVALS]
        if "grants" in extra:  # enrolled: the operator grants it, as the person does at pairing
            extra = extra | {"grants": [*extra["grants"], "approvals"]}
    return body | extra


@dataclass
class World:
    """A tenant with an operator, on one API client."""

    client: httpx.AsyncClient
    tenant: str = "acme"
    operator: str = ""
    agents: dict[str, str] = field(default_factory=dict)

    async def start(self) -> World:
        gateway = self.client.app.state.gateway  # type: ignore[attr-defined]
        self.operator = (await gateway.create_tenant(self.tenant)).token
        return self

    async def person(self, user_id: str) -> str:
        """Add a person; return their user token."""
        r = await self.client.post("/v1/users", json={"user_id": user_id}, headers=bearer(self.operator))
        assert r.status_code == 201, r.text
        return await self.token(user_id, "user")

    async def token(self, user_id: str, kind: str, **body: Any) -> str:
        r = await self.client.post(
            f"/v1/users/{user_id}/tokens", json={"kind": kind, **body}, headers=bearer(self.operator)
        )
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    async def agent(self, user_id: str, agent_id: str = "assistant") -> str:
        return await self.token(user_id, "agent", agent_id=agent_id)

    async def enrol(self, user_id: str, body: dict[str, Any]) -> str:
        """Enrol ``body`` as the operator; a device that declares ``approvals`` is granted it, as the
        person grants it when they pair their phone."""
        if any(c.get("name") == "approvals" for c in body["capabilities"]):
            body = body | {"grants": sorted({*body.get("grants", []), "approvals"})}
        r = await self.client.post(f"/v1/users/{user_id}/devices", json=body, headers=bearer(self.operator))
        assert r.status_code == 201, r.text
        return str(r.json()["device_token"])

    async def tool_names(self, agent: str, session_id: str | None = None) -> list[str]:
        params = {"session_id": session_id} if session_id else {}
        r = await self.client.get("/v1/tools", params=params, headers=bearer(agent))
        assert r.status_code == 200, r.text
        return [t["function"]["name"] for t in r.json()["tools"]]
