"""The person's console: sign-in by the phone or an operator's link, and every page acting as the person."""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.approvals import sign_decision, signed_text
from tapgate.domain.console import describe_browser, same_network
from tapgate.domain.shown import shown_time
from tests.conftest import asgi_client
from tests.world import LAMP, Key, World, bearer, device_body, new_key

LAMP_TOOL = "device__desk_lamp__set_light"


@pytest.fixture
async def client(sqlite_url: str, clock: FrozenClock) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=sqlite_url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(settings, clock) as c:
        yield c


class Person:
    """ana with a paired phone (P-256) and a granted desk lamp, and her agent."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.phone_key: Key = new_key("p256")
        self.tokens: dict[str, str] = {}

    async def build(self) -> Person:
        w = self.world
        self.tokens["user"] = await w.person("ana")
        self.tokens["agent"] = await w.agent("ana")
        self.tokens["phone"] = await w.enrol("ana", device_body("ana-phone", [], self.phone_key))
        self.tokens["lamp"] = await w.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
        return self

    @property
    def client(self) -> httpx.AsyncClient:
        return self.world.client

    def sign(self, approval: dict[str, Any], decision: str) -> str:
        sign = approval["sign"]
        payload = signed_text(
            sign["format"],
            approval["id"],
            decision,
            approval["kind"],
            approval["subject"],
            sign["action_sha256"],
            sign["challenge"],
            sign["expires_at"],
        )
        return sign_decision(self.phone_key.private, payload)

    async def link(self, user: str = "ana") -> str:
        gateway = self.client.app.state.gateway  # type: ignore[attr-defined]
        url: str = await gateway.console_link(await gateway.authenticate(self.world.operator), user)
        return url.split("://", 1)[1].split("/", 1)[1]

    async def sign_in_by_link(self) -> None:
        path = "/" + await self.link()
        page = await self.client.get(path)
        assert page.status_code == 200 and "Sign in" in page.text
        r = await self.client.post(path, content=b"", headers={"content-type": FORM})
        assert r.status_code == 303, r.text
        assert r.headers["location"] == "/console/devices"

    async def page(self, path: str) -> str:
        r = await self.client.get(path)
        assert r.status_code == 200, r.text
        return r.text

    def csrf(self, html: str) -> str:
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
        assert match is not None
        return match.group(1)

    async def post(self, path: str, fields: dict[str, str], csrf: str | None = "auto") -> httpx.Response:
        if csrf == "auto":
            csrf = self.csrf(await self.page("/console/devices"))
        body = httpx.QueryParams({**fields, **({"csrf": csrf} if csrf else {})})
        return await self.client.post(path, content=str(body).encode(), headers={"content-type": FORM})

    async def call(self, **arguments: Any) -> dict[str, Any]:
        r = await self.client.post(
            "/v1/invocations",
            json={"tool": LAMP_TOOL, "arguments": {"on": True, **arguments}},
            headers=bearer(self.tokens["agent"]),
        )
        assert r.status_code == 200, r.text
        return dict(r.json())


FORM = "application/x-www-form-urlencoded"


@pytest.fixture
async def ana(client: httpx.AsyncClient) -> Person:
    return await Person(await World(client).start()).build()


async def test_a_paired_phone_signs_the_person_into_the_console(ana: Person) -> None:
    page = await ana.client.get("/console/sign-in", params={"tenant": "acme"})
    assert page.status_code == 200
    assert "data:image/svg+xml;base64," in page.text  # the QR code
    sign_in_id = re.search(r"#console=acme\.([0-9a-f]{16})", page.text)
    assert sign_in_id is not None
    status = await ana.client.get("/console/sign-in/status")
    assert "Waiting for your phone" in status.text

    r = await ana.client.post(
        f"/v1/console/sign-ins/{sign_in_id.group(1)}/ask", headers=bearer(ana.tokens["phone"])
    )
    assert r.status_code == 201, r.text
    approval = r.json()
    assert approval["kind"] == "console_login"
    assert approval["subject"] == sign_in_id.group(1)
    [inboxed] = (await ana.client.get("/v1/inbox", headers=bearer(ana.tokens["phone"]))).json()["approvals"]
    assert inboxed["id"] == approval["id"]
    status = await ana.client.get("/console/sign-in/status")
    assert approval["binding_code"] in status.text  # the console shows the code the phone shows

    r = await ana.client.post(
        f"/v1/approvals/{approval['id']}",
        json={"decision": "approved", "signature": ana.sign(approval, "approved")},
        headers=bearer(ana.tokens["phone"]),
    )
    assert r.status_code == 200, r.text
    done = await ana.client.get("/console/sign-in/status", headers={"hx-request": "true"})
    assert done.headers["hx-redirect"] == "/console/devices"
    cookie = done.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=43200" in cookie
    assert "Desk lamp" in await ana.page("/console/devices")
    # the browser's sign-in is spent: a second session cannot come of it
    again = await ana.client.post("/console/sign-in/finish")
    assert again.status_code in (303, 410)


async def test_a_console_sign_in_is_never_decided_without_a_device_signature(ana: Person) -> None:
    page = await ana.client.get("/console/sign-in", params={"tenant": "acme"})
    sign_in_id = re.search(r"#console=acme\.([0-9a-f]{16})", page.text)
    assert sign_in_id is not None
    approval = (
        await ana.client.post(
            f"/v1/console/sign-ins/{sign_in_id.group(1)}/ask", headers=bearer(ana.tokens["phone"])
        )
    ).json()
    for token in (ana.tokens["user"], ana.world.operator):
        r = await ana.client.post(
            f"/v1/approvals/{approval['id']}", json={"decision": "approved"}, headers=bearer(token)
        )
        assert r.status_code == 403, r.text
    r = await ana.client.post("/console/sign-in/finish")
    assert r.status_code == 410  # still not approved: no session
    assert (await ana.client.get("/console/devices")).headers["location"] == "/console/sign-in"


async def test_a_phone_that_declines_leaves_the_browser_signed_out(ana: Person) -> None:
    page = await ana.client.get("/console/sign-in", params={"tenant": "acme"})
    sign_in_id = re.search(r"#console=acme\.([0-9a-f]{16})", page.text)
    assert sign_in_id is not None
    approval = (
        await ana.client.post(
            f"/v1/console/sign-ins/{sign_in_id.group(1)}/ask", headers=bearer(ana.tokens["phone"])
        )
    ).json()
    r = await ana.client.post(
        f"/v1/approvals/{approval['id']}",
        json={"decision": "denied", "signature": ana.sign(approval, "denied")},
        headers=bearer(ana.tokens["phone"]),
    )
    assert r.status_code == 200, r.text
    assert "declined" in (await ana.client.get("/console/sign-in/status")).text
    assert (await ana.client.post("/console/sign-in/finish")).status_code == 410


async def test_the_sign_in_pages_hint_names_the_tenant_unless_it_is_the_default(ana: Person) -> None:
    elsewhere = (await ana.client.get("/console/sign-in?tenant=acme")).text
    assert "<code>tapgate console link --user YOU --tenant acme</code>" in elsewhere
    default = (await ana.client.get("/console/sign-in")).text
    assert "<code>tapgate console link --user YOU</code>" in default


async def test_an_operators_link_signs_in_once(ana: Person) -> None:
    path = "/" + await ana.link()
    assert (await ana.client.post(path, content=b"", headers={"content-type": FORM})).status_code == 303
    again = await ana.client.post(path, content=b"", headers={"content-type": FORM})
    assert again.status_code == 410
    assert "used or has expired" in again.text


async def test_an_expired_link_signs_nobody_in(ana: Person, clock: FrozenClock) -> None:
    path = "/" + await ana.link()
    clock.advance(16 * 60)
    r = await ana.client.post(path, content=b"", headers={"content-type": FORM})
    assert r.status_code == 410


async def test_every_page_needs_a_session_and_carries_the_strict_policy(ana: Person) -> None:
    for path in ("/console/devices", "/console/approvals", "/console/calls", "/console/audit"):
        r = await ana.client.get(path)
        assert r.status_code == 303 and r.headers["location"] == "/console/sign-in"
    await ana.sign_in_by_link()
    for path in (
        "/console/devices",
        "/console/approvals",
        "/console/calls",
        "/console/agents",
        "/console/mandates",
        "/console/audit",
    ):
        r = await ana.client.get(path)
        assert r.status_code == 200, path
        policy = r.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "form-action 'self'" in policy
        assert "<script>" not in r.text and " on" + "click=" not in r.text


async def test_the_console_and_the_app_name_an_icon_that_is_there(ana: Person) -> None:
    for page in ("/console/sign-in?tenant=acme", "/app/"):
        r = await ana.client.get(page)
        icon = re.search(r'<link rel="icon" href="([^"]+)"', r.text)
        assert icon is not None, page
        shown = await ana.client.get(urljoin(page, icon.group(1)))
        assert shown.status_code == 200 and shown.headers["content-type"] == "image/png", page


async def test_a_form_without_its_csrf_token_changes_nothing(ana: Person) -> None:
    await ana.sign_in_by_link()
    for csrf in (None, "0" * 40):
        r = await ana.post("/console/agents/pause", {"paused": "true"}, csrf=csrf)
        assert r.status_code == 403, r.text
    assert (await ana.call())["status"] == "pending"  # not paused


async def test_pause_all_agents_refuses_every_call_until_resumed(ana: Person) -> None:
    await ana.sign_in_by_link()
    r = await ana.post("/console/agents/pause", {"paused": "true", "back": "/console/agents"})
    assert r.status_code == 303 and r.headers["location"] == "/console/agents?said=paused"
    assert "All agents paused" in await ana.page("/console/agents")
    refused = await ana.call()
    assert refused["status"] == "refused"
    assert refused["reason"] == "[deny] paused by the person"
    gateway = ana.client.app.state.gateway  # type: ignore[attr-defined]
    stream = gateway.events(await gateway.authenticate(ana.tokens["agent"]), 0, idle=0.01)
    seen = []
    async for event in stream:
        if event is None:
            break
        seen.append(event.type)
    assert "agents.paused" in seen  # the agent's stream says so
    await ana.post("/console/agents/pause", {"paused": "false"})
    assert (await ana.call())["status"] == "pending"
    audit = await ana.page("/console/audit")
    assert "agents.paused" in audit and "agents.resumed" in audit
    assert "The journal verifies" in audit


async def test_switching_a_grant_off_takes_the_tool_from_the_agent(ana: Person) -> None:
    await ana.sign_in_by_link()
    assert LAMP_TOOL in await ana.world.tool_names(ana.tokens["agent"])
    r = await ana.post("/console/devices/desk-lamp/grants", {})  # no box ticked
    assert r.status_code == 303, r.text
    assert LAMP_TOOL not in await ana.world.tool_names(ana.tokens["agent"])
    await ana.post("/console/devices/desk-lamp/grants", {"grant": "set_light"})
    assert LAMP_TOOL in await ana.world.tool_names(ana.tokens["agent"])


async def test_revoking_a_device_from_the_console_ends_its_token(ana: Person) -> None:
    await ana.sign_in_by_link()
    r = await ana.post("/console/devices/desk-lamp/revoke", {})
    assert r.status_code == 303
    fetched = await ana.client.get("/v1/device/invocations", headers=bearer(ana.tokens["lamp"]))
    assert fetched.status_code == 401
    assert "Desk lamp" not in await ana.page("/console/devices")


async def test_the_calls_page_shows_done_and_refused_calls_with_their_reasons(ana: Person) -> None:
    await ana.sign_in_by_link()
    await ana.call(brightness=40)
    refused = await ana.call(scene="purple")
    assert refused["status"] == "refused"
    html = await ana.page("/console/calls")
    assert html.count(LAMP_TOOL) == 2
    assert "pending" in html and "refused" in html and "scene" in html
    only_refused = await ana.page("/console/calls?status=refused")
    assert only_refused.count(LAMP_TOOL) == 1
    bad = await ana.client.get("/console/calls", params={"status": "nonsense"})
    assert bad.status_code == 422 and "status must be one of" in bad.text


async def test_a_revoked_console_session_is_signed_out(ana: Person) -> None:
    await ana.sign_in_by_link()
    html = await ana.page("/console/sessions")
    [session_id] = re.findall(r"/console/sessions/([0-9a-f]{16})/revoke", html)
    r = await ana.post(f"/console/sessions/{session_id}/revoke", {})
    assert r.status_code == 303 and r.headers["location"].startswith("/console/sign-in")
    ana.client.cookies.clear()
    assert (await ana.client.get("/console/devices")).status_code == 303


async def test_the_console_shows_a_new_device_pairing_with_its_code(ana: Person) -> None:
    await ana.sign_in_by_link()
    r = await ana.post("/console/pairings", {})
    assert r.status_code == 303
    html = await ana.page(r.headers["location"])
    assert "data:image/svg+xml;base64," in html and "/app/#pair=tgp_" in html


async def test_the_consoles_pairing_shows_approvals_as_can_approve_for_you_and_grants_what_is_ticked(
    ana: Person,
) -> None:
    # ana's phone no longer approves for her: a new device is let in where she started the pairing.
    r = await ana.client.put(
        "/v1/users/ana/devices/ana-phone/grants",
        json={"grants": {"approvals": False}},
        headers=bearer(ana.tokens["user"]),
    )
    assert r.status_code == 200, r.text
    await ana.sign_in_by_link()
    r = await ana.post("/console/pairings", {})
    location = r.headers["location"]
    code = re.search(r"#pair=(tgp_[\w]+)", await ana.page(location))
    assert code is not None
    claim = {"code": code.group(1), **device_body("tablet", [LAMP])}  # a phone: it declares approvals
    claimed = await ana.client.post("/v1/pair", json=claim)
    assert claimed.status_code == 201, claimed.text
    html = await ana.page(location)
    assert "can approve for you" in html and 'value="approvals" checked' in html

    fields = {
        "comparison_code": claimed.json()["comparison_code"],
        "decision": "approved",
        "grant": "approvals",
    }
    r = await ana.post(f"{location}/consent", fields)
    assert r.status_code == 303, r.text
    devices = (await ana.client.get("/v1/users/ana/devices", headers=bearer(ana.tokens["user"]))).json()
    [tablet] = [d for d in devices["devices"] if d["device_id"] == "tablet"]
    assert {c["name"]: c["granted"] for c in tablet["capabilities"]} == {
        "set_light": False,
        "approvals": True,
    }


async def test_the_person_gives_an_agent_a_token_once_and_revokes_it(ana: Person) -> None:
    await ana.sign_in_by_link()
    r = await ana.post("/console/agents/tokens", {"agent_id": "planner", "scope": "tools", "expires": "1d"})
    assert r.status_code == 200, r.text
    token = re.search(r'id="new-token" class="token" value="(tga_[^"]+)"', r.text)
    assert token is not None
    assert "shown this once" in r.text
    tools = await ana.client.get("/v1/tools", headers=bearer(token.group(1)))
    assert tools.status_code == 200
    page = await ana.page("/console/agents")
    assert "planner" in page and token.group(1) not in page  # listed, never shown again
    row = next(r for r in page.split("<tr>") if "<td>planner</td>" in r)
    token_id = re.findall(r"/console/agents/tokens/([0-9a-f]{16})/revoke", row)[0]
    r = await ana.post(f"/console/agents/tokens/{token_id}/revoke", {})
    assert r.status_code == 303
    assert (await ana.client.get("/v1/tools", headers=bearer(token.group(1)))).status_code == 401


async def test_the_console_writes_every_time_as_the_phone_does(ana: Person, clock: FrozenClock) -> None:
    await ana.sign_in_by_link()
    r = await ana.post("/console/agents/tokens", {"agent_id": "planner", "scope": "tools", "expires": "1d"})
    assert r.status_code == 200, r.text
    made, until = shown_time(clock.now()), shown_time(clock.now() + timedelta(days=1))
    assert made == "01 Jan 2026 00:00 UTC"
    pages = {
        path: await ana.page(path) for path in ("/console/agents", "/console/sessions", "/console/audit")
    }
    assert made in pages["/console/agents"] and until in pages["/console/agents"]
    assert made in pages["/console/sessions"] and made in pages["/console/audit"]
    for path, page in pages.items():
        assert not re.search(r"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d", page), path


async def test_an_agent_named_in_the_console_is_who_asks_on_its_approvals(ana: Person) -> None:
    await ana.sign_in_by_link()
    fields = {"agent_id": "planner", "agent_name": "Ana's planner", "scope": "tools", "expires": "1d"}
    r = await ana.post("/console/agents/tokens", fields)
    token = re.search(r'id="new-token" class="token" value="(tga_[^"]+)"', r.text)
    assert token is not None
    asked = await ana.client.post(
        "/v1/invocations",
        json={"tool": LAMP_TOOL, "arguments": {"on": True}, "origin": "untrusted"},
        headers=bearer(token.group(1)),
    )
    assert asked.json()["status"] == "awaiting_approval", asked.text
    listed = html.unescape(await ana.page("/console/approvals/pending"))
    assert "Ana's planner asks to use Desk lamp: Set light." in listed
    assert "it came from a message you received" in listed
    assert "planner asks" not in listed.replace("Ana's planner asks", "")
    assert "“Ana's planner” on your cards" in html.unescape(await ana.page("/console/agents"))


async def test_a_token_for_another_persons_agent_cannot_be_revoked_from_the_console(ana: Person) -> None:
    await ana.world.person("bob")
    bobs = await ana.world.agent("bob")
    gateway = ana.client.app.state.gateway  # type: ignore[attr-defined]
    bob_token_id = (await gateway.authenticate(bobs)).credential_id
    await ana.sign_in_by_link()
    r = await ana.post(f"/console/agents/tokens/{bob_token_id}/revoke", {})
    assert r.status_code == 404
    assert (await ana.client.get("/v1/tools", headers=bearer(bobs))).status_code == 200


# who may sign in, from where, and how much an open sign-in page may cost


def browser_at(ana: Person, address: str = "127.0.0.1", **headers: str) -> httpx.AsyncClient:
    """Another browser on the same gateway, its requests coming from ``address``."""
    app = ana.client.app  # type: ignore[attr-defined]
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://tapgate.test", headers=headers)


async def start_phone_sign_in(browser: httpx.AsyncClient, tenant: str = "acme") -> str:
    page = await browser.get("/console/sign-in", params={"tenant": tenant})
    assert page.status_code == 200, page.text
    found = re.search(rf"#console={tenant}\.([0-9a-f]{{16}})", page.text)
    assert found is not None
    return found.group(1)


async def approve_on_phone(ana: Person, sign_in_id: str) -> dict[str, Any]:
    asked = await ana.client.post(
        f"/v1/console/sign-ins/{sign_in_id}/ask", headers=bearer(ana.tokens["phone"])
    )
    assert asked.status_code == 201, asked.text
    approval: dict[str, Any] = asked.json()
    r = await ana.client.post(
        f"/v1/approvals/{approval['id']}",
        json={"decision": "approved", "signature": ana.sign(approval, "approved")},
        headers=bearer(ana.tokens["phone"]),
    )
    assert r.status_code == 200, r.text
    return approval


async def signed_in_by_phone(ana: Person, browser: httpx.AsyncClient) -> str:
    """``browser`` signs in with the phone's yes; the session's id."""
    await approve_on_phone(ana, await start_phone_sign_in(browser))
    done = await browser.get("/console/sign-in/status", headers={"hx-request": "true"})
    assert done.headers.get("hx-redirect") == "/console/devices", done.text
    html = (await browser.get("/console/sessions")).text
    mine = re.search(r"/console/sessions/([0-9a-f]{16})/revoke[^<]*<input[^>]*>\s*<button[^>]*>End", html)
    assert mine is not None
    return mine.group(1)


async def test_a_phone_sign_ins_token_never_signs_a_browser_in_through_the_link_route(ana: Person) -> None:
    async with browser_at(ana) as attacker, browser_at(ana) as victim:
        await approve_on_phone(ana, await start_phone_sign_in(attacker))
        token = attacker.cookies["tapgate_console_sign_in"]  # the attacker's own approved sign-in
        planted = await victim.post(f"/console/link/{token}", content=b"", headers={"content-type": FORM})
        assert planted.status_code == 410, planted.text
        assert "tapgate_console" not in victim.cookies
        assert (await victim.get("/console/devices")).headers["location"] == "/console/sign-in"
        # it is spent by nobody: it still completes, in the browser that started it
        done = await attacker.post("/console/sign-in/finish")
        assert done.status_code == 303 and done.headers["location"] == "/console/devices"


async def test_an_operators_link_never_opens_from_another_origin_and_stays_usable(ana: Person) -> None:
    path = "/" + await ana.link()
    for headers in ({"origin": "https://evil.example"}, {"origin": "null"}, {"sec-fetch-site": "cross-site"}):
        r = await ana.client.post(path, content=b"", headers={"content-type": FORM, **headers})
        assert r.status_code == 403, (headers, r.text)
        assert "sent from another site" in r.text
        assert "tapgate_console" not in ana.client.cookies
    r = await ana.client.post(
        path, content=b"", headers={"content-type": FORM, "origin": "http://tapgate.test"}
    )
    assert r.status_code == 303 and r.headers["location"] == "/console/devices"


async def test_a_console_form_posted_from_another_origin_changes_nothing(ana: Person) -> None:
    await ana.sign_in_by_link()
    csrf = ana.csrf(await ana.page("/console/devices"))
    body = str(httpx.QueryParams({"paused": "true", "csrf": csrf})).encode()
    for headers in (
        {"origin": "https://evil.example"},
        {"origin": "null"},
        {"origin": "null", "sec-fetch-site": "cross-site"},
        {"origin": "http://tapgate.test.evil.example"},
        {"origin": "https://evil.example", "sec-fetch-site": "same-origin"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ):
        r = await ana.client.post(
            "/console/agents/pause", content=body, headers={"content-type": FORM, **headers}
        )
        assert r.status_code == 403, (headers, r.text)
        assert (await ana.call())["status"] == "pending"  # not paused
    for headers in (
        {"origin": "http://tapgate.test"},
        {"sec-fetch-site": "same-origin"},
        {"origin": "null", "sec-fetch-site": "same-origin"},  # a same-origin form under no-referrer
    ):
        r = await ana.client.post(
            "/console/agents/pause", content=body, headers={"content-type": FORM, **headers}
        )
        assert r.status_code == 303, (headers, r.text)
    assert (await ana.call())["status"] == "refused"


async def test_the_gateways_public_url_is_its_own_origin_too(sqlite_url: str, clock: FrozenClock) -> None:
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        public_url="https://gw.example",
    )
    async with asgi_client(settings, clock) as client:
        ana = await Person(await World(client).start()).build()
        path = "/" + await ana.link()
        r = await client.post(
            path, content=b"", headers={"content-type": FORM, "origin": "https://gw.example:443"}
        )
        assert r.status_code == 303, r.text


async def test_console_sessions_are_listed_with_the_persons_tokens_and_revoked_like_one(ana: Person) -> None:
    async with browser_at(ana) as browser:
        session_id = await signed_in_by_phone(ana, browser)
        listed = await ana.client.get("/v1/users/ana/tokens", headers=bearer(ana.tokens["user"]))
        [row] = [t for t in listed.json()["tokens"] if t["kind"] == "console_session"]
        assert row["token_id"] == session_id
        assert row["signed_in_by"] == "ana-phone" and row["user_id"] == "ana"
        assert row["created_at"] and row["expires_at"] and row["last_used_at"]
        sessions_page = (await browser.get("/console/sessions")).text
        assert "<td>ana-phone</td>" in sessions_page and "just now" in sessions_page
        everyone = await ana.client.get("/v1/tokens?kind=console_session", headers=bearer(ana.world.operator))
        assert [t["token_id"] for t in everyone.json()["tokens"]] == [session_id]
        r = await ana.client.delete(f"/v1/tokens/{session_id}", headers=bearer(ana.tokens["user"]))
        assert r.status_code == 204, r.text
        assert (await browser.get("/console/devices")).headers["location"] == "/console/sign-in"
        listed = await ana.client.get("/v1/users/ana/tokens", headers=bearer(ana.tokens["user"]))
        assert [t["kind"] for t in listed.json()["tokens"]].count("console_session") == 0
        again = await ana.client.delete(f"/v1/tokens/{session_id}", headers=bearer(ana.tokens["user"]))
        assert again.status_code == 404


async def test_an_operator_ends_a_persons_console_session(ana: Person) -> None:
    async with browser_at(ana) as browser:
        session_id = await signed_in_by_phone(ana, browser)
        r = await ana.client.delete(f"/v1/tokens/{session_id}", headers=bearer(ana.world.operator))
        assert r.status_code == 204, r.text
        assert (await browser.get("/console/agents")).status_code == 303


async def test_another_persons_console_session_is_not_theirs_to_list_or_end(ana: Person) -> None:
    bob = await ana.world.person("bob")
    async with browser_at(ana) as browser:
        session_id = await signed_in_by_phone(ana, browser)
        assert (await ana.client.get("/v1/users/ana/tokens", headers=bearer(bob))).status_code == 404
        r = await ana.client.delete(f"/v1/tokens/{session_id}", headers=bearer(bob))
        assert r.status_code == 404, r.text
        agent = await ana.client.delete(f"/v1/tokens/{session_id}", headers=bearer(ana.tokens["agent"]))
        assert agent.status_code == 403
        assert (await browser.get("/console/devices")).status_code == 200


async def test_removing_the_device_that_signed_a_session_in_ends_that_session(ana: Person) -> None:
    await ana.sign_in_by_link()  # a session no device signed in
    async with browser_at(ana) as browser:
        await signed_in_by_phone(ana, browser)
        r = await ana.client.delete("/v1/users/ana/devices/ana-phone", headers=bearer(ana.world.operator))
        assert r.status_code == 204, r.text
        assert (await browser.get("/console/devices")).headers["location"] == "/console/sign-in"
    assert (await ana.client.get("/console/devices")).status_code == 200  # the link's session stays
    assert "console.session_revoked" in await ana.page("/console/audit")


async def test_withdrawing_approvals_from_the_device_that_signed_a_session_in_ends_that_session(
    ana: Person,
) -> None:
    async with browser_at(ana) as browser:
        await signed_in_by_phone(ana, browser)
        r = await ana.client.put(
            "/v1/users/ana/devices/ana-phone/grants",
            json={"grants": {"approvals": False}},
            headers=bearer(ana.world.operator),
        )
        assert r.status_code == 200, r.text
        assert (await browser.get("/console/devices")).headers["location"] == "/console/sign-in"


async def test_an_agent_token_made_in_the_console_expires_and_names_its_session(
    ana: Person, clock: FrozenClock
) -> None:
    async with browser_at(ana) as browser:
        session_id = await signed_in_by_phone(ana, browser)
        csrf = ana.csrf((await browser.get("/console/agents")).text)
        page = (await browser.get("/console/agents")).text
        assert re.findall(r'<option value="([^"]*)"', page) == ["1h", "1d", "30d", "90d"]
        assert 'value="90d" selected' in page
        for expires in ("", "never", "365d"):
            body = str(httpx.QueryParams({"agent_id": "planner", "csrf": csrf, "expires": expires})).encode()
            r = await browser.post("/console/agents/tokens", content=body, headers={"content-type": FORM})
            if expires:
                assert r.status_code == 422 and "expires must be one of 1h, 1d, 30d, 90d" in r.text
            else:
                assert r.status_code == 200, r.text
        listed = await ana.client.get("/v1/users/ana/tokens", headers=bearer(ana.tokens["user"]))
        [made] = [t for t in listed.json()["tokens"] if t["agent_id"] == "planner"]
        assert made["console_session_id"] == session_id
        assert made["expires_at"].startswith((clock.now() + timedelta(days=90)).date().isoformat())
        assert "in this session" in (await browser.get("/console/agents")).text


async def test_expired_console_sign_ins_are_deleted_by_the_sweep(ana: Person, clock: FrozenClock) -> None:
    gateway = ana.client.app.state.gateway  # type: ignore[attr-defined]
    started = [await start_phone_sign_in(ana.client) for _ in range(3)]
    clock.advance(5 * 60)
    assert await gateway.sweep_sign_ins() == 0
    clock.advance(6 * 60)
    assert await gateway.sweep_sign_ins() == 3
    async with gateway.store.unit_of_work("acme") as uow:
        assert [await uow.sign_ins.get(s) for s in started] == [None, None, None]


async def test_the_gateways_own_sweep_deletes_a_sign_in_within_a_minute_of_its_end(
    ana: Person, clock: FrozenClock
) -> None:
    gateway = ana.client.app.state.gateway  # type: ignore[attr-defined]
    started = await start_phone_sign_in(ana.client)
    clock.advance(11 * 60)  # past its end, and past the minute since the sweep last deleted sign-ins
    deadline = time.monotonic() + 15
    while True:
        async with gateway.store.unit_of_work("acme") as uow:
            if await uow.sign_ins.get(started) is None:
                break
        assert time.monotonic() < deadline, "the background sweep did not delete the expired sign-in"
        await asyncio.sleep(0.05)


async def test_one_address_holds_only_so_many_open_sign_ins(sqlite_url: str, clock: FrozenClock) -> None:
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        console_sign_ins_per_address=3,
    )
    async with asgi_client(settings, clock) as client:
        ana = await Person(await World(client).start()).build()
        for _ in range(3):
            await start_phone_sign_in(ana.client)
        for tenant in ("acme", "nobody"):
            refused = await ana.client.get("/console/sign-in", params={"tenant": tenant})
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
            assert "Too many console sign-ins were started from your address" in refused.text
        async with browser_at(ana, "203.0.113.9") as elsewhere:
            await start_phone_sign_in(elsewhere)  # another address has its own
        clock.advance(10 * 60 + 1)
        await start_phone_sign_in(ana.client)  # the first ones have ended


def _shape(html: str) -> str:
    html = re.sub(r"data:image/svg\+xml;base64,[A-Za-z0-9+/=]+", "QR", html)
    return re.sub(r"#console=[a-z0-9-]+\.[0-9a-f]{16}", "#console=T.ID", html).replace("nobody", "acme")


async def test_an_unknown_tenants_sign_in_page_looks_like_a_known_ones(ana: Person) -> None:
    async with browser_at(ana) as known, browser_at(ana) as unknown:
        pages = [
            await b.get("/console/sign-in", params={"tenant": t})
            for b, t in ((known, "acme"), (unknown, "nobody"))
        ]
        assert [p.status_code for p in pages] == [200, 200]
        assert _shape(pages[0].text) == _shape(pages[1].text)
        assert pages[0].headers.keys() == pages[1].headers.keys()
        polled = [await b.get("/console/sign-in/status") for b in (known, unknown)]
        assert [p.status_code for p in polled] == [200, 200]
        assert polled[0].text == polled[1].text and "Waiting for your phone" in polled[0].text
        bad = await known.get("/console/sign-in", params={"tenant": "Not A Tenant"})
        assert bad.status_code == 422


async def test_the_console_login_card_shows_the_address_the_server_saw_not_the_browsers_words(
    ana: Person,
) -> None:
    relayed = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Chrome/126.0 Safari/537.36 Ana's MacBook"
    async with browser_at(ana, "203.0.113.9", **{"user-agent": relayed}) as far:
        approval = await approve_on_phone(ana, await start_phone_sign_in(far))
    fields = {f["label"]: f["value"] for f in approval["preview"]["fields"]}
    assert fields["Requested"] == "from another network: 203.0.113.9"
    assert fields["Browser (as it says)"] == "Chrome on macOS"
    assert "MacBook" not in str(approval)
    assert "from another network: 203.0.113.9" in approval["prompt"]
    async with browser_at(ana, "127.0.0.1") as near:
        approval = await approve_on_phone(ana, await start_phone_sign_in(near))
    fields = {f["label"]: f["value"] for f in approval["preview"]["fields"]}
    assert fields["Requested"] == "on this phone's network (127.0.0.1)"


def test_two_addresses_are_one_network_only_when_one_router_or_one_local_network_could_hold_both() -> None:
    assert same_network("203.0.113.9", "203.0.113.9")  # one home router, seen from outside
    assert same_network("192.168.1.20", "192.168.1.77")  # one local network
    assert same_network("2001:db8:1:2::5", "2001:db8:1:2:abcd::9")  # one IPv6 /64
    assert not same_network("81.2.69.142", "81.2.69.143")  # neighbours at one provider are not
    assert not same_network("192.168.1.20", "192.168.2.20")
    assert not same_network("2001:db8:1:2::5", "2001:db8:1:3::5")
    assert not same_network("10.0.0.1", "::ffff:10.0.0.1") and not same_network("", "")
    assert describe_browser("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0) Version/17.0 Mobile Safari/604.1") == (
        "Safari on iOS"
    )
    assert describe_browser("curl/8.5.0 <script>") == "an unknown browser"


async def test_the_mandates_page_shows_each_mandates_bounds_and_uses_and_revokes_one_only_with_its_csrf(
    ana: Person,
) -> None:
    body = {
        "tools": [LAMP_TOOL],
        "constraints": {"brightness": {"max": 60}},
        "max_calls": 3,
        "per_day": 2,
        "expires_in_seconds": 3600,
        "purpose": "evening lights",
    }
    r = await ana.client.post("/v1/mandates", json=body, headers=bearer(ana.tokens["agent"]))
    assert r.status_code == 202, r.text
    asked = r.json()
    inbox = (await ana.client.get("/v1/inbox", headers=bearer(ana.tokens["phone"]))).json()["approvals"]
    [card] = [a for a in inbox if a["id"] == asked["approval_id"]]
    decision = {"decision": "approved", "signature": ana.sign(card, "approved")}
    r = await ana.client.post(
        f"/v1/approvals/{card['id']}", json=decision, headers=bearer(ana.tokens["phone"])
    )
    assert r.status_code == 200, r.text
    await ana.sign_in_by_link()
    page = await ana.page("/console/mandates")
    for words in ("evening lights", "brightness max 60", "0 of 3; 0 of 2 today", "active", LAMP_TOOL):
        assert words in page
    revoke = f"/console/mandates/{asked['mandate_id']}/revoke"

    async def status() -> str:
        r = await ana.client.get(f"/v1/mandates/{asked['mandate_id']}", headers=bearer(ana.tokens["user"]))
        return str(r.json()["status"])

    for csrf in (None, "0" * 40):
        assert (await ana.post(revoke, {}, csrf=csrf)).status_code == 403
    csrf = ana.csrf(page)
    forged = str(httpx.QueryParams({"csrf": csrf})).encode()
    r = await ana.client.post(
        revoke, content=forged, headers={"content-type": FORM, "origin": "https://evil.example"}
    )
    assert r.status_code == 403
    assert await status() == "active"  # nothing changed
    r = await ana.post(revoke, {})
    assert r.status_code == 303 and r.headers["location"] == "/console/mandates?said=mandate-revoked"
    assert "revoked" in await ana.page("/console/mandates")
    assert await status() == "revoked"
