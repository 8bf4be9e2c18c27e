"""The authorization matrix with the device flags on: every route the app's OpenAPI lists × every kind of
caller. Only the intended cells succeed; a caller that is not the resource's owner gets the very answer a
made-up id gets (404, no existence oracle). A route missing from the table fails the test, so a new route
must say who may call it.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tapgate.config import Settings
from tapgate.domain.approvals import sign_decision, signed_text
from tapgate.domain.console import SignInKind
from tests.conftest import asgi_client
from tests.passkey_authenticator import SoftAuthenticator
from tests.reliability import report
from tests.world import LAMP, Key, World, bearer, device_body, new_key

DOOR = LAMP | {"name": "unlock_door", "description": "Unlock the front door.", "confirm": True}
ANA_LAMP = "device__desk_lamp__set_light"


@dataclass(frozen=True)
class Caller:
    name: str
    kind: str  # operator, user, agent, device, none
    scopes: frozenset[str] = frozenset()
    owner: str = "ana"  # whose: ana, bob (same tenant), tom (another tenant)
    valid: bool = True
    approver: bool = True  # a device granted approvals: it speaks for its person


USER_SCOPES = {"device.read", "device.write", "approve"}
AGENT_SCOPES = {"tools", "events"}
CALLERS = [
    Caller("operator", "operator"),
    Caller("user", "user", frozenset(USER_SCOPES)),
    *(Caller(f"user-without-{s}", "user", frozenset(USER_SCOPES - {s})) for s in sorted(USER_SCOPES)),
    Caller("agent", "agent", frozenset(AGENT_SCOPES)),
    *(Caller(f"agent-without-{s}", "agent", frozenset(AGENT_SCOPES - {s})) for s in sorted(AGENT_SCOPES)),
    Caller("device", "device", frozenset({"device.read", "device.write"})),
    Caller("lamp", "device", frozenset({"device.read", "device.write"}), approver=False),
    Caller("other-user", "user", frozenset(USER_SCOPES), "bob"),
    Caller("other-users-agent", "agent", frozenset(AGENT_SCOPES), "bob"),
    Caller("other-users-device", "device", frozenset({"device.read", "device.write"}), "bob"),
    Caller("other-tenant-operator", "operator", owner="tom"),
    Caller("other-tenant-user", "user", frozenset(USER_SCOPES), "tom"),
    Caller("other-tenant-agent", "agent", frozenset(AGENT_SCOPES), "tom"),
    Caller("other-tenant-device", "device", frozenset({"device.read", "device.write"}), "tom"),
    Caller("revoked-device", "device", valid=False),
    Caller("no-token", "none", valid=False),
    Caller("garbage-token", "none", valid=False),
]


@dataclass(frozen=True)
class Rule:
    """Who may call a route: token kinds, each with the scope it needs (None: none needed), and whether
    the route reaches ana's own resources (``of_ana``) or acts on the caller's own world."""

    kinds: dict[str, str | None]
    of_ana: bool = False
    open: bool = False  # no token needed
    foreign: str = ""  # the path parameter that names ana's resource
    approvers: bool = False  # a device must be an approver (a lamp is refused)
    own_device: bool = False  # the resource is the device's own: ana's other device gets 404 too

    def expect(self, caller: Caller) -> int | str:
        if self.open:
            return "ok"
        if not caller.valid:
            return 401
        if caller.kind not in self.kinds:
            return 403
        scope = self.kinds[caller.kind]
        if scope is not None and scope not in caller.scopes:
            return 403
        if self.of_ana and (caller.owner != "ana" and (caller.kind != "operator" or caller.owner == "tom")):
            return 404
        if self.own_device and caller.kind == "device" and caller.name != "device":
            return 404
        if self.approvers and caller.kind == "device" and not caller.approver:
            return 403
        return "ok"


OPERATOR = {"operator": None}
AGENT_TOOLS = {"agent": "tools"}
DEVICE_READ, DEVICE_WRITE = {"device": "device.read"}, {"device": "device.write"}
USER_READ = {"operator": None, "user": "device.read"}
USER_WRITE = {"operator": None, "user": "device.write"}
MANDATE_READERS = {"operator": None, "user": None, "agent": "tools", "device": None}
PROOF_READERS = {"operator": None, "user": None, "agent": "tools"}
RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): Rule({}, open=True),
    ("GET", "/readyz"): Rule({}, open=True),
    ("GET", "/metrics"): Rule({}, open=True),
    ("GET", "/app/config.json"): Rule({}, open=True),
    ("POST", "/v1/notices"): Rule({"operator": None, "agent": "notices"}, of_ana=True),
    ("POST", "/v1/pair"): Rule({}, open=True),
    ("POST", "/v1/users"): Rule(OPERATOR),
    ("POST", "/v1/users/{user_id}/tokens"): Rule(OPERATOR, of_ana=True, foreign="user_id"),
    ("GET", "/v1/audit"): Rule(OPERATOR),
    ("GET", "/v1/users/{user_id}/tokens"): Rule(
        {"operator": None, "user": None}, of_ana=True, foreign="user_id"
    ),
    ("GET", "/v1/tokens"): Rule(OPERATOR),
    ("DELETE", "/v1/tokens/{token_id}"): Rule(
        {"operator": None, "user": None}, of_ana=True, foreign="token_id"
    ),
    ("PUT", "/v1/sessions/{session_id}"): Rule(AGENT_TOOLS),
    ("POST", "/v1/sessions/{session_id}/messages"): Rule(AGENT_TOOLS, of_ana=True, foreign="session_id"),
    ("GET", "/v1/tools"): Rule(AGENT_TOOLS),
    ("POST", "/v1/invocations"): Rule(AGENT_TOOLS),
    ("GET", "/v1/invocations/{invocation_id}"): Rule(
        {"agent": "tools", "user": None}, of_ana=True, foreign="invocation_id"
    ),
    ("GET", "/v1/events"): Rule({"agent": "events"}),
    ("POST", "/v1/users/{user_id}/devices"): Rule(OPERATOR, of_ana=True, foreign="user_id"),
    ("GET", "/v1/users/{user_id}/devices"): Rule(USER_READ, of_ana=True, foreign="user_id"),
    ("PUT", "/v1/users/{user_id}/devices/{device_id}/grants"): Rule(
        USER_WRITE, of_ana=True, foreign="user_id"
    ),
    ("DELETE", "/v1/users/{user_id}/devices/{device_id}"): Rule(USER_WRITE, of_ana=True, foreign="user_id"),
    ("POST", "/v1/users/{user_id}/pairings"): Rule(USER_WRITE, of_ana=True, foreign="user_id"),
    ("GET", "/v1/pairings/{pairing_id}"): Rule(USER_READ, of_ana=True, foreign="pairing_id"),
    ("GET", "/v1/pairings/{pairing_id}/qr.svg"): Rule(USER_WRITE, of_ana=True, foreign="pairing_id"),
    ("POST", "/v1/pairings/{pairing_id}/consent"): Rule(USER_WRITE, of_ana=True, foreign="pairing_id"),
    ("PUT", "/v1/device/capabilities"): Rule(DEVICE_WRITE),
    ("POST", "/v1/device/heartbeat"): Rule(DEVICE_READ),
    ("GET", "/v1/device/invocations"): Rule(DEVICE_READ),
    ("POST", "/v1/device/invocations/{invocation_id}/result"): Rule(
        DEVICE_WRITE, of_ana=True, foreign="invocation_id", own_device=True
    ),
    ("POST", "/v1/device/ingest"): Rule(DEVICE_WRITE),
    ("GET", "/v1/inbox"): Rule({"user": "approve", "device": None}),
    # any approver may answer a console's sign-in: the person whose phone answers is the one signed in
    ("POST", "/v1/console/sign-ins/{sign_in_id}/ask"): Rule({"device": None}, approvers=True),
    ("POST", "/v1/approvals/{approval_id}"): Rule(
        {"operator": None, "user": "approve", "device": None},
        of_ana=True,
        foreign="approval_id",
        approvers=True,
    ),
    ("POST", "/v1/mandates"): Rule({"agent": "tools", "user": None}),
    ("GET", "/v1/mandates"): Rule(MANDATE_READERS, approvers=True),
    ("GET", "/v1/mandates/{mandate_id}"): Rule(
        MANDATE_READERS, of_ana=True, foreign="mandate_id", approvers=True
    ),
    ("DELETE", "/v1/mandates/{mandate_id}"): Rule(
        {"operator": None, "user": None, "device": None}, of_ana=True, foreign="mandate_id", approvers=True
    ),
    ("GET", "/.well-known/jwks.json"): Rule({}, open=True),
    ("GET", "/v1/approvals/{approval_id}/proof"): Rule(PROOF_READERS, of_ana=True, foreign="approval_id"),
    ("GET", "/v1/mandates/{mandate_id}/proof"): Rule(PROOF_READERS, of_ana=True, foreign="mandate_id"),
    ("GET", "/v1/invocations/{invocation_id}/proof"): Rule(
        PROOF_READERS, of_ana=True, foreign="invocation_id"
    ),
    ("GET", "/v1/device/passkeys/options"): Rule(DEVICE_READ),
    ("GET", "/v1/device/passkeys"): Rule(DEVICE_READ),
    ("POST", "/v1/device/passkeys"): Rule(DEVICE_WRITE),
    ("PUT", "/v1/users/{user_id}/user-verification"): Rule(OPERATOR, of_ana=True, foreign="user_id"),
}


_MANDATE = {"expires_in_seconds": 3600, "purpose": "the matrix"}


@dataclass
class Matrix:
    world: World
    tokens: dict[str, str] = field(default_factory=dict)
    keys: dict[str, Key] = field(default_factory=dict)
    pairing: str = ""
    signed: dict[str, str] = field(default_factory=dict)  # a signed call's approval and a signed mandate

    @property
    def client(self) -> httpx.AsyncClient:
        return self.world.client

    async def build(self) -> Matrix:
        w = self.world
        gateway = w.client.app.state.gateway  # type: ignore[attr-defined]
        t = self.tokens
        t["operator"] = w.operator
        t["other-tenant-operator"] = (await gateway.create_tenant("globex")).token
        for user in ("ana", "bob"):
            await self.post("operator", "/v1/users", {"user_id": user})
        await self.post("other-tenant-operator", "/v1/users", {"user_id": "tom"})
        for caller in CALLERS:
            if caller.kind not in ("user", "agent") or caller.name in t:
                continue
            admin = "other-tenant-operator" if caller.owner == "tom" else "operator"
            body = {"kind": caller.kind, "scopes": sorted(caller.scopes)}
            r = await self.post(admin, f"/v1/users/{caller.owner}/tokens", body)
            t[caller.name] = r.json()["token"]
        for name, admin, owner, device_id, caps in (
            ("device", "operator", "ana", "desk-lamp", [LAMP, {"name": "sms_send"}, {"name": "approvals"}]),
            ("lamp", "operator", "ana", "hall-lamp", [LAMP]),
            ("door", "operator", "ana", "front-door", [DOOR]),
            ("other-users-device", "operator", "bob", "bob-phone", [LAMP, {"name": "sms_send"}]),
            (
                "other-tenant-device",
                "other-tenant-operator",
                "tom",
                "tom-phone",
                [LAMP, {"name": "sms_send"}],
            ),
            ("revoked-device", "operator", "ana", "old-lamp", [LAMP]),
        ):
            self.keys[name] = new_key("ed25519")
            body = device_body(device_id, caps, self.keys[name], grants=[c["name"] for c in caps])
            t[name] = (await self.post(admin, f"/v1/users/{owner}/devices", body)).json()["device_token"]
        r = await self.client.delete("/v1/users/ana/devices/old-lamp", headers=bearer(t["operator"]))
        assert r.status_code == 204
        t["garbage-token"] = "tgd_acme_0123456789abcdef_" + "0" * 64
        await self.client.put(
            "/v1/sessions/s1", json={"kind": "chat", "attended": True}, headers=bearer(t["agent"])
        )
        self.pairing = (await self.post("user", "/v1/users/ana/pairings", {})).json()["pairing_id"]
        return self

    async def post(self, who: str, path: str, body: object) -> httpx.Response:
        r = await self.client.post(path, json=body, headers=bearer(self.tokens[who]))
        assert r.status_code in (200, 201, 202), (path, r.text)
        return r

    # fresh resources for the cells whose success uses one up

    async def invocation(self, tool: str = ANA_LAMP) -> str:
        body = {"tool": tool, "arguments": {"on": True}}
        return str((await self.post("agent", "/v1/invocations", body)).json()["id"])

    async def approval(self) -> dict[str, Any]:
        await self.invocation("device__front_door__unlock_door")
        r = await self.client.get("/v1/inbox", headers=bearer(self.tokens["user"]))
        asked = [a for a in r.json()["approvals"] if a["kind"] == "unlock_door"]  # not a device_pair
        return dict(asked[-1])  # oldest first: the newest is the one just asked

    async def sign(self, approval: dict[str, Any], signer: str = "device") -> None:
        sign = approval["sign"]
        text = signed_text(
            sign["format"], approval["id"], "approved", approval["kind"], approval["subject"],
            sign["action_sha256"], sign["challenge"], sign["expires_at"],
        )  # fmt: skip
        body = {"decision": "approved", "signature": sign_decision(self.keys[signer].private, text)}
        await self.post(signer, f"/v1/approvals/{approval['id']}", body)

    async def inbox(self) -> list[dict[str, Any]]:
        r = await self.client.get("/v1/inbox", headers=bearer(self.tokens["user"]))
        return list(r.json()["approvals"])

    async def proven(self) -> dict[str, str]:
        """A call whose approval ana's phone signed, and a mandate it signed: made once, read by each cell."""
        if not self.signed:
            before = {a["id"] for a in await self.inbox()}
            call = await self.invocation("device__front_door__unlock_door")
            [approval] = [a for a in await self.inbox() if a["id"] not in before]
            await self.sign(approval)
            body = {"tools": [ANA_LAMP], "max_calls": 1} | _MANDATE
            asked = (await self.post("agent", "/v1/mandates", body)).json()
            await self.sign(next(a for a in await self.inbox() if a["id"] == asked["approval_id"]))
            self.signed = {
                "approval_id": approval["id"],
                "invocation_id": call,
                "mandate_id": asked["mandate_id"],
            }
        return self.signed

    async def claimed_pairing(self) -> tuple[str, str]:
        code = (await self.post("operator", "/v1/users/ana/pairings", {})).json()["code"]
        body = device_body(f"p{secrets.token_hex(3)}", []) | {"code": code}
        r = await self.client.post("/v1/pair", json=body)
        assert r.status_code == 201, r.text
        return r.json()["pairing_id"], r.json()["comparison_code"]

    async def cell(self, method: str, template: str, caller: Caller) -> tuple[str, Any]:
        """The path and body of a request that succeeds for an intended caller."""
        path = template.replace("{user_id}", "ana").replace("{session_id}", "s1")
        body: Any = None
        if template == "/v1/users":
            body = {"user_id": f"u{secrets.token_hex(3)}"}
        elif method == "POST" and template.endswith("/tokens"):
            body = {"kind": "agent"}
        elif template == "/v1/tokens/{token_id}":
            fresh = await self.post("operator", "/v1/users/ana/tokens", {"kind": "agent"})
            path = path.replace("{token_id}", fresh.json()["token_id"])
        elif method == "POST" and template == "/v1/users/{user_id}/devices":
            body = device_body(f"d{secrets.token_hex(3)}", [LAMP])
        elif template.endswith("/grants"):
            path, body = path.replace("{device_id}", "desk-lamp"), {"grants": {"set_light": True}}
        elif template == "/v1/mandates" and method == "POST":
            device = {"tom": "tom_phone", "bob": "bob_phone"}.get(caller.owner, "desk_lamp")
            body = {"tools": [f"device__{device}__set_light"], "max_calls": 1} | _MANDATE
        elif template == "/v1/mandates":
            path = "/v1/mandates?user_id=ana"
        elif template.endswith("/proof"):
            name = template.split("{")[1].split("}")[0]
            path = path.replace("{" + name + "}", (await self.proven())[name])
            if name == "invocation_id" and caller.kind == "operator":
                path += "?user_id=ana"
        elif template == "/v1/mandates/{mandate_id}":
            body = {"tools": [ANA_LAMP], "max_calls": 1} | _MANDATE
            asked = await self.post("user", "/v1/mandates", body)
            path, body = path.replace("{mandate_id}", asked.json()["mandate_id"]), None
        elif method == "DELETE":
            fresh = f"x{secrets.token_hex(3)}"
            await self.post("operator", "/v1/users/ana/devices", device_body(fresh, []))
            path = path.replace("{device_id}", fresh)
        elif template.endswith("/pairings"):
            body = {}
        elif template in ("/v1/pairings/{pairing_id}", "/v1/pairings/{pairing_id}/qr.svg"):
            path = path.replace("{pairing_id}", self.pairing)
        elif template == "/v1/pair":
            code = (await self.post("operator", "/v1/users/ana/pairings", {})).json()["code"]
            body = device_body(f"p{secrets.token_hex(3)}", []) | {"code": code}
        elif template.endswith("/consent"):
            pairing_id, comparison = await self.claimed_pairing()
            path = path.replace("{pairing_id}", pairing_id)
            # ana has devices: only the operator says yes here; a user's yes is a device's to sign (§15).
            approved = caller.kind == "operator"
            body = {"comparison_code": comparison, "approved": approved, "grants": []}
        elif template == "/v1/sessions/{session_id}":
            body = {"kind": "chat", "attended": True}
        elif template.endswith("/messages"):
            body = {"capabilities": []}
        elif template == "/v1/invocations":
            body = {"tool": ANA_LAMP, "arguments": {"on": True}}
        elif template == "/v1/invocations/{invocation_id}":
            path = path.replace("{invocation_id}", await self.invocation())
        elif template.endswith("/result"):
            path, body = path.replace("{invocation_id}", await self.invocation()), {"status": "done"}
        elif template == "/v1/device/capabilities":
            body = {"capabilities": [LAMP, {"name": "sms_send"}]}
        elif template == "/v1/notices":
            body = {"event": "goal.done", "user_id": "ana", "data": {"goal_id": "g1"}}
        elif template == "/v1/device/ingest":
            text = f"hello {secrets.token_hex(4)}"
            body = {
                "channel": "sms",
                "sender": "+15550001111",
                "body": text,
                "received_at": "2026-01-01T08:00:00Z",
            }
        elif template == "/v1/console/sign-ins/{sign_in_id}/ask":
            gateway = self.client.app.state.gateway  # type: ignore[attr-defined]
            sign_in, _ = await gateway.start_console_sign_in(
                "globex" if caller.owner == "tom" else "acme", "", f"192.0.2.{secrets.randbelow(250)}"
            )
            path = path.replace("{sign_in_id}", sign_in.sign_in_id)
        elif template == "/v1/users/{user_id}/user-verification":
            body = {"require_user_verification": None}
        elif method == "POST" and template == "/v1/device/passkeys":
            body = {"credential": {}}
            if caller.kind == "device" and caller.valid:
                options = (await self.send("GET", "/v1/device/passkeys/options", None, caller))[1]
                authenticator = SoftAuthenticator(options["rp"]["id"], "http://127.0.0.1:8080")
                body = {"credential": authenticator.register(options["challenge"])}
        elif template == "/v1/approvals/{approval_id}":
            approval = await self.approval()
            path, body = path.replace("{approval_id}", approval["id"]), {"decision": "approved"}
            if caller.kind == "device" and caller.name in self.keys:
                sign = approval["sign"]
                text = signed_text(
                    sign["format"], approval["id"], "approved", approval["kind"], approval["subject"],
                    sign["action_sha256"], sign["challenge"], sign["expires_at"],
                )  # fmt: skip
                body["signature"] = sign_decision(self.keys[caller.name].private, text)
        return path, body

    async def send(self, method: str, path: str, body: Any, caller: Caller) -> tuple[int, dict[str, Any]]:
        headers = bearer(self.tokens[caller.name]) if caller.name in self.tokens else {}
        if path.startswith("/v1/events"):
            return await _stream_status(self.client.app, path, headers), {}  # type: ignore[attr-defined]
        r = await self.client.request(method, path, json=body, headers=headers)
        is_json = r.headers.get("content-type", "").startswith("application/json")
        return r.status_code, (r.json() if is_json and r.content else {})


async def _stream_status(app: Any, path: str, headers: dict[str, str]) -> int:
    """The status a streaming route starts its answer with (an event stream never ends by itself)."""
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1), "server": ("tapgate.test", 80),
    }  # fmt: skip

    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await started
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and not started.done():
            started.set_result(message["status"])

    task = asyncio.create_task(app(scope, receive, send))
    try:
        return await asyncio.wait_for(asyncio.shield(started), timeout=5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def matrix(sqlite_url: str) -> AsyncIterator[Matrix]:
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        max_devices_per_user=1000,
        max_open_confirmations=1000,
    )
    async with asgi_client(settings) as client:
        yield await Matrix(await World(client).start()).build()


def _operations(client: httpx.AsyncClient) -> set[tuple[str, str]]:
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    return {(method.upper(), path) for path, ops in paths.items() for method in ops}


def _normalise(answer: dict[str, Any], value: str) -> str:
    return str(answer).replace(value, "<id>")


async def test_the_table_names_every_route_the_app_serves(matrix: Matrix) -> None:
    assert _operations(matrix.client) == set(RULES)


async def test_every_route_admits_exactly_its_intended_callers_and_tells_foreign_from_unknown_by_nothing(
    matrix: Matrix,
) -> None:
    cells = foreign_checks = 0
    wrong: list[tuple[str, str, str, int | str, int]] = []
    for method, template in sorted(_operations(matrix.client)):
        rule = RULES[(method, template)]
        for caller in CALLERS:
            path, body = await matrix.cell(method, template, caller)
            status, answer = await matrix.send(method, path, body, caller)
            cells += 1
            expected = rule.expect(caller)
            ok = 200 <= status < 300 if expected == "ok" else status == expected
            if not ok:
                wrong.append((method, template, caller.name, expected, status))
                continue
            if expected == 404 and rule.foreign:  # the same answer as for an id that does not exist
                foreign = _foreign_value(template, rule.foreign, path)
                fake = "nobody" if rule.foreign == "user_id" else f"zz{secrets.token_hex(8)}"
                fake_status, fake_answer = await matrix.send(
                    method, path.replace(foreign, fake), body, caller
                )
                foreign_checks += 1
                same = (fake_status, _normalise(fake_answer, fake)) == (status, _normalise(answer, foreign))
                assert same, (method, template, caller.name, answer, fake_answer)
    assert not wrong, "\n".join(map(str, wrong))
    report(
        "authorization matrix",
        routes=len(RULES),
        callers=len(CALLERS),
        cells=cells,
        foreign_vs_unknown=foreign_checks,
    )
    assert cells == len(RULES) * len(CALLERS)


def _foreign_value(template: str, parameter: str, path: str) -> str:
    pattern = re.escape(template).replace(re.escape("{" + parameter + "}"), "(?P<v>[^/]+)")
    pattern = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", pattern)
    found = re.fullmatch(pattern, path.split("?", 1)[0])
    assert found, (template, path)
    return found.group("v")


async def test_a_console_session_is_ended_by_the_callers_that_end_anas_tokens_and_is_unknown_to_the_rest(
    matrix: Matrix,
) -> None:
    """``DELETE /v1/tokens/{token_id}`` on a console session of ana's: her own user token and her
    tenant's operator end it; another person's (or tenant's) caller gets the answer an unknown id gets."""
    gateway = matrix.client.app.state.gateway  # type: ignore[attr-defined]
    operator = await gateway.authenticate(matrix.tokens["operator"])
    rule = RULES[("DELETE", "/v1/tokens/{token_id}")]
    wrong = []
    for caller in CALLERS:
        link = await gateway.console_link(operator, "ana")
        session = (await gateway.finish_console_sign_in(link.rsplit("/", 1)[1], SignInKind.LINK, "")).session
        path = f"/v1/tokens/{session.session_id}"
        status, answer = await matrix.send("DELETE", path, None, caller)
        expected = rule.expect(caller)
        if not ((200 <= status < 300) if expected == "ok" else status == expected):
            wrong.append((caller.name, expected, status))
            continue
        live = [t.token_id for t in await gateway.list_user_tokens(operator, "ana")]
        assert (session.session_id in live) == (expected != "ok"), caller.name
        if expected == 404:
            fake = f"{secrets.token_hex(8)}"
            unknown = await matrix.send("DELETE", f"/v1/tokens/{fake}", None, caller)
            assert (unknown[0], _normalise(unknown[1], fake)) == (
                status,
                _normalise(answer, session.session_id),
            )
    assert not wrong, wrong
