"""The browser phone app in headless Chromium against a real gateway (`tapgate serve` on loopback, SQLite).

A person pairs by opening the QR code's link, the test consents with the code the page shows, and then
the app gets invocations and approvals, confirms, declines and signs them with its WebCrypto key, while
an agent speaks HTTP to the same gateway.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import pytest_asyncio

from tapgate.adapters.store.migrate import migrate
from tapgate.adapters.store.sql import open_sql_store
from tests.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, NOT_LOOPBACK, PLATFORM_APPS, require_browser
from tests.conftest import blocking
from tests.live import Server, free_port, new_tenant, write_config
from tests.pushfakes import Accounts, LoopbackServer, PushFakes, new_accounts
from tests.world import bearer, device_body

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Locator, Page

DOOR = {
    "name": "unlock_door",
    "kind": "actuator",
    "description": "Unlock the front door.",
    "params": {"minutes": {"type": "integer", "description": "How long it stays unlocked"}},
    "confirm": True,
}
WAIT_MS = 30_000  # the longest any one step of the app may take here (two busy cores: seconds)

# One event loop for the module, so one Chromium serves every test (each in a fresh profile).
pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass
class Gateway:
    server: Server
    database_url: str
    push: PushFakes


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    require_browser()
    folder = tmp_path_factory.mktemp("browser-app")
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    accounts: Accounts = new_accounts()
    port = free_port()
    config = write_config(
        folder,
        url,
        public_url=f"http://127.0.0.1:{port}",
        **{
            "webpush.vapid_private_key": accounts.vapid_private_b64,
            "webpush.subject": accounts.vapid_subject,
        },
    )
    server = Server(config, port=port).start()
    try:
        with LoopbackServer(PushFakes(accounts)) as push:
            yield Gateway(server, url, push)
    finally:
        server.stop()


@dataclass
class Home:
    """ana on a fresh tenant of the live gateway: her user token, her agent, and an HTTP client."""

    client: httpx.AsyncClient
    operator: str
    user: str
    agent: str
    chat: str | None = None

    async def start_pairing(self) -> dict[str, str]:
        r = await self.client.post("/v1/users/ana/pairings", json={}, headers=bearer(self.user))
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def invoke(self, tool: str, arguments: dict[str, Any], **body: Any) -> dict[str, Any]:
        r = await self.client.post(
            "/v1/invocations", json={"tool": tool, "arguments": arguments, **body}, headers=bearer(self.agent)
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def phone_action(self, action: str, summary: str = "", **fields: Any) -> dict[str, Any]:
        """phone_action in an attended chat whose latest message came from ana's phone."""
        if self.chat is None:
            agent = bearer(self.agent)
            r = await self.client.put(
                "/v1/sessions/chat-1", json={"kind": "chat", "attended": True}, headers=agent
            )
            assert r.status_code == 200, r.text
            message = {"device_id": "ana-phone", "capabilities": ["phone_actions"]}
            r = await self.client.post("/v1/sessions/chat-1/messages", json=message, headers=agent)
            assert r.status_code == 201, r.text
            self.chat = "chat-1"
        arguments = {"action": action, "summary": summary, **fields}
        return await self.invoke("phone_action", arguments, session_id=self.chat)

    async def view(self, invocation_id: str, wait: float = 0) -> dict[str, Any]:
        r = await self.client.get(f"/v1/invocations/{invocation_id}?wait={wait}", headers=bearer(self.agent))
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def device(self, device_id: str = "ana-phone") -> dict[str, Any]:
        r = await self.client.get("/v1/users/ana/devices", headers=bearer(self.user))
        return next(d for d in r.json()["devices"] if d["device_id"] == device_id)

    async def audit(self) -> list[dict[str, Any]]:
        r = await self.client.get("/v1/audit?limit=1000", headers=bearer(self.operator))
        return list(r.json()["entries"])


@pytest_asyncio.fixture(loop_scope="module")
async def home(gateway: Gateway) -> AsyncIterator[Home]:
    operator = await new_tenant(gateway.database_url)
    async with httpx.AsyncClient(base_url=gateway.server.url, timeout=30) as client:
        r = await client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator))
        assert r.status_code == 201, r.text
        tokens = []
        for kind in ("user", "agent"):
            body = {"kind": kind} | ({"agent_id": "assistant"} if kind == "agent" else {})
            r = await client.post("/v1/users/ana/tokens", json=body, headers=bearer(operator))
            tokens.append(r.json()["token"])
        yield Home(client, operator, *tokens)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(gateway: Gateway) -> AsyncIterator[Browser]:
    from playwright.async_api import async_playwright, expect

    # Every expectation waits up to WAIT_MS: on a busy two-core machine a step can take seconds.
    expect.set_options(timeout=WAIT_MS)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@dataclass
class Phone:
    """One browser profile with the app open in it."""

    context: BrowserContext
    page: Page
    home: Home
    device_id: str = "ana-phone"
    problems: list[str] = field(default_factory=list)

    def card(self, text: str) -> Locator:
        """The card that shows ``text`` (its binding code, its summary)."""
        return self.page.locator("article.card", has_text=text)

    def recent(self, text: str) -> Locator:
        return self.page.locator("#recent li", has_text=text)

    async def open(self, url: str) -> Page:
        """The app in a new page of this profile, as when the person opens it again."""
        self.page = await self.context.new_page()
        self._watch(self.page)
        await self.page.goto(url)
        return self.page

    def _watch(self, page: Page) -> None:
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on(
            "console",
            lambda message: (
                self.problems.append(f"console: {message.text}")
                if "Content Security Policy" in message.text or "Refused to" in message.text
                else None
            ),
        )

    async def token(self) -> str:
        """The device token the app keeps (what a device that declares more capabilities would send)."""
        return str(
            await self.page.evaluate(
                "import('/app/store.js').then((s) => s.loadDevice()).then((d) => d.token)"
            )
        )


async def new_phone(browser: Browser, home: Home, **options: Any) -> Phone:
    context = await browser.new_context(
        viewport={"width": 390, "height": 844}, device_scale_factor=2, has_touch=True, **options
    )
    await context.route(NOT_LOOPBACK, lambda route: route.abort())
    await context.add_init_script(PLATFORM_APPS)
    page = await context.new_page()
    if "notifications" not in options.get("permissions", []):
        # As when the person said no to notifications before: headless Chromium would otherwise leave
        # the app's question open for two seconds before it says no by itself.
        cdp = await context.new_cdp_session(page)
        target = await cdp.send("Target.getTargetInfo")
        await cdp.send(
            "Browser.setPermission",
            {
                "permission": {"name": "notifications"},
                "setting": "denied",
                "browserContextId": target["targetInfo"]["browserContextId"],
            },
        )
        # The override lasts as long as this DevTools session: it stays attached with the page.
    phone = Phone(context, page, home)
    phone._watch(page)
    return phone


def artifact(name: str) -> Path:
    """Where a screenshot for people to look at goes (tests/artifacts/, not committed)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    print(f"\nscreenshot: {path}")  # noqa: T201
    return path


async def pair(
    phone: Phone,
    alg: str | None = None,
    screenshot: str | None = None,
    link: str = "live",
    consent_by: str | None = None,
) -> dict[str, str]:
    """Open the pairing link, pair, read the comparison code off the page and consent with it (ana's user
    token, or ``consent_by``); return once the app is connected by ``link`` (live: its WebSocket;
    polling: long-polls)."""
    from playwright.async_api import expect

    home, page = phone.home, phone.page
    pairing = await home.start_pairing()
    await page.goto(pairing["url"] + (f"&alg={alg}" if alg else ""))
    await expect(page.locator("#screen-pair")).to_be_visible()
    await page.fill("#pair-name", "Ana's phone")
    await page.fill("#pair-id", phone.device_id)
    await page.click("#pair-button")
    shown = page.locator("#comparison-code")
    await expect(shown).to_have_text(re.compile(r"^\d{3} \d{3}$"), timeout=WAIT_MS)
    code = (await shown.inner_text()).replace(" ", "")
    if screenshot:
        await page.screenshot(path=artifact(screenshot))
    r = await home.client.post(
        f"/v1/pairings/{pairing['pairing_id']}/consent",
        json={
            "comparison_code": code,
            "approved": True,
            "grants": ["phone_actions", "sms_send", "approvals"],
        },
        headers=bearer(consent_by or home.user),
    )
    assert r.status_code == 200, r.text
    await expect(page.locator("#screen-home")).to_be_visible(timeout=WAIT_MS)
    state = page.locator("#link-state")
    await expect(state).to_have_attribute("data-state", link, timeout=WAIT_MS)
    await expect(state).to_have_text("Connected")
    return pairing


@pytest_asyncio.fixture(loop_scope="module")
async def phone(browser: Browser, home: Home) -> AsyncIterator[Phone]:
    """ana's phone, paired, the app open and connected."""
    paired = await new_phone(browser, home)
    await pair(paired)
    yield paired
    assert paired.problems == []
    await paired.context.close()


# -- pairing -------------------------------------------------------------------------------------------------


async def test_the_app_pairs_from_the_qr_link_with_a_key_that_cannot_leave_the_browser(
    browser: Browser, home: Home, gateway: Gateway
) -> None:
    from playwright.async_api import expect

    phone = await new_phone(browser, home)
    pairing = await pair(phone, screenshot="browser-comparison-code.png")
    assert "#" not in phone.page.url  # the code left the address bar and the history
    device = await home.device()
    assert device["status"] == "active"
    assert device["alg"] == "ed25519"  # Chromium has Ed25519, so the app chose it
    assert device["name"] == "Ana's phone"
    assert {c["name"]: c["granted"] for c in device["capabilities"]} == {
        "phone_actions": True,
        "sms_send": True,
        "approvals": True,  # the app declares it; the person granted it: it can approve for her
    }
    key = await phone.page.evaluate(
        """async () => {
            const device = await (await import('/app/store.js')).loadDevice();
            let exported = 'exported';
            try { await crypto.subtle.exportKey('pkcs8', device.keys.privateKey); }
            catch (e) { exported = e.name; }
            const spki = await crypto.subtle.exportKey('spki', device.keys.publicKey);
            return {extractable: device.keys.privateKey.extractable, exported,
                    spki: btoa(String.fromCharCode(...new Uint8Array(spki)))};
        }"""
    )
    assert key == {"extractable": False, "exported": "InvalidAccessError", "spki": device["public_key"]}
    assert pairing["code"] not in gateway.server.logs()

    await phone.page.reload()  # the key and the token outlive the page
    await expect(phone.page.locator("#screen-home")).to_be_visible()
    await expect(phone.page.locator("#link-state")).to_have_text("Connected", timeout=WAIT_MS)
    assert phone.problems == []
    await phone.context.close()


async def test_a_device_removed_from_the_gateway_goes_back_to_the_pairing_screen(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    r = await home.client.delete("/v1/users/ana/devices/ana-phone", headers=bearer(home.user))
    assert r.status_code == 204
    await expect(phone.page.locator("#screen-welcome")).to_be_visible(timeout=WAIT_MS)
    await expect(phone.page.locator("#notice")).to_contain_text("removed from your gateway")
    assert await phone.page.evaluate("import('/app/store.js').then((s) => s.loadDevice())") is None


async def test_a_new_pairing_link_can_be_kept_away_or_replace_the_device_this_browser_holds(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    page = phone.page
    first = await home.start_pairing()
    await page.goto(first["url"])
    await expect(page.locator("#notice")).to_contain_text("This browser is paired as Ana's phone")
    await page.get_by_role("button", name="Keep the current pairing").click()
    await expect(page.locator("#screen-home")).to_be_visible()
    await expect(page.locator("#link-state")).to_have_attribute("data-state", "live")

    phone.device_id = "ana-tablet"
    await pair(phone, consent_by=home.operator)  # ana's phone is still paired: only it or the operator vouch
    held = await page.evaluate("import('/app/store.js').then((s) => s.loadDevice()).then((d) => d.device_id)")
    assert held == "ana-tablet"
    assert (await home.device("ana-tablet"))["status"] == "active"


# -- invocations ---------------------------------------------------------------------------------------------


async def test_a_phone_action_confirmed_on_its_card_opens_the_page_and_the_agent_reads_done(
    phone: Phone, home: Home, gateway: Gateway
) -> None:
    from playwright.async_api import expect

    target = f"{gateway.server.url}/healthz"
    call = await home.phone_action("open_url", "Open the gateway's health page", url=target)
    assert call["status"] == "pending"
    card = phone.card("Open the gateway's health page")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".card-title")).to_have_text("Open a web page")
    await expect(card.locator(".fields")).to_contain_text(target)
    async with phone.context.expect_page() as opened:
        await card.locator(".confirm").click()
    tab = await opened.value
    assert tab.url == target
    view = await home.view(call["id"], wait=WAIT_MS / 1000)
    assert view["status"] == "done"
    assert view["result"]["text"] == (
        "Done: the person confirmed open_url on their phone and the phone carried it out.\n\n"
        "The phone says: The page opened in the browser."
    )
    await expect(card).to_have_count(0)


@pytest.mark.parametrize(
    ("action", "fields", "href"),
    [
        ("dial", {"number": "+351 912 345 678"}, "tel:+351912345678"),
        (
            "sms_draft",
            {"to": ["+351 912 345 678"], "body": "Até já!"},
            "sms:+351912345678?body=At%C3%A9%20j%C3%A1!",
        ),
        (
            "email_draft",
            {"to": ["rui@example.com"], "subject": "Dinner", "body": "At 8?"},
            "mailto:rui@example.com?subject=Dinner&body=At%208%3F",
        ),
        (
            "navigate",
            {"destination": {"lat": 38.7223, "lon": -9.1393}, "mode": "walk"},
            "https://www.google.com/maps/dir/?api=1&destination=38.7223%2C-9.1393&travelmode=walking"
            "&dir_action=navigate",
        ),
        (
            "add_stop",
            {"stop": {"query": "petrol station"}, "destination": {"name": "Lisbon airport"}},
            "https://www.google.com/maps/dir/?api=1&destination=Lisbon+airport&travelmode=driving"
            "&waypoints=petrol+station&dir_action=navigate",
        ),
        (
            "search_nearby",
            {"query": "pharmacy"},
            "https://www.google.com/maps/search/?api=1&query=pharmacy",
        ),
    ],
)
async def test_each_linked_action_opens_the_platforms_own_link_and_answers_done(
    phone: Phone, home: Home, action: str, fields: dict[str, Any], href: str
) -> None:
    from playwright.async_api import expect

    call = await home.phone_action(action, f"Do {action}", **fields)
    card = phone.card(f"Do {action}")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.locator(".confirm").click()
    await expect(phone.recent("done").locator("a")).to_have_attribute("href", href)
    view = await home.view(call["id"], wait=WAIT_MS / 1000)
    assert view["status"] == "done", view
    handed = await phone.page.evaluate("window.platformLinks")
    assert handed == ([] if href.startswith("https:") else [href])  # the phone's own app got the link
    assert phone.page.url.startswith(f"{home.client.base_url}/app/")  # the app stayed where it was


async def test_a_calendar_event_is_offered_as_a_calendar_file(phone: Phone, home: Home) -> None:
    from playwright.async_api import expect

    call = await home.phone_action(
        "calendar_event",
        "Dentist",
        title="Dentist, Dr. Sá",
        start="2026-12-03T09:30",
        end="2026-12-03T10:15",
        location="Rua Augusta 10",
    )
    card = phone.card("Dentist")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    async with phone.page.expect_download() as offered:
        await card.locator(".confirm").click()
    download = await offered.value
    assert download.suggested_filename == "event.ics"
    text = (await download.path()).read_bytes().decode("utf-8")
    lines = text.split("\r\n")
    assert "SUMMARY:Dentist\\, Dr. Sá" in lines
    assert "DTSTART:20261203T093000" in lines
    assert "DTEND:20261203T101500" in lines
    assert "LOCATION:Rua Augusta 10" in lines
    assert f"UID:{call['id']}@tapgate" in lines
    assert (await home.view(call["id"], wait=WAIT_MS / 1000))["status"] == "done"


async def test_an_action_a_browser_cannot_do_answers_failed_with_the_reason_at_once(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    cannot = {
        "torch": ({"on": True}, "A web app cannot switch the torch."),
        "alarm": (
            {"time": "07:30"},
            "A web app cannot set alarms: browsers give web pages no way into the clock app.",
        ),
        "timer": (
            {"seconds": 300},
            "A web app cannot start timers: browsers give web pages no way into the clock app.",
        ),
        "media": ({"command": "pause"}, "A web app cannot control what other apps are playing."),
        "settings_panel": ({"panel": "wifi"}, "A web app cannot open the phone's settings."),
        "open_app": ({"app": "Spotify"}, "A web app cannot open other apps by name."),
        "automation_intent": ({"name": "Leaving home"}, "A web app cannot run automations in other apps."),
        "stop_navigation": ({}, "A web app cannot end a route in the map app."),
        "search_nearby": (
            {"query": "coffee", "near": "route"},
            "A map link cannot search along the running route.",
        ),
    }
    for action, (fields, reason) in cannot.items():
        call = await home.phone_action(action, **fields)
        view = await home.view(call["id"], wait=WAIT_MS / 1000)
        assert view["status"] == "failed", (action, view)
        assert view["result"]["text"] == (
            f"The phone could not carry out {action}.\n\nThe phone says: {reason}"
        )
        await expect(phone.recent(reason)).to_have_count(1)
    await expect(phone.page.locator("article.card")).to_have_count(0)  # nothing was put to the person


async def test_a_declined_card_answers_declined(phone: Phone, home: Home) -> None:
    from playwright.async_api import expect

    call = await home.phone_action("dial", "Call the plumber", number="+351 210 000 000")
    card = phone.card("Call the plumber")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.locator(".decline").click()
    view = await home.view(call["id"], wait=WAIT_MS / 1000)
    assert view["status"] == "declined"
    assert view["result"]["text"].startswith("The person declined dial on their phone.")


@pytest.mark.parametrize(("button", "status"), [("Sent", "done"), ("Not sent", "declined")])
async def test_sms_send_opens_the_prefilled_draft_and_the_person_says_whether_it_went(
    phone: Phone, home: Home, button: str, status: str
) -> None:
    from playwright.async_api import expect

    call = await home.invoke("device__ana_phone__sms_send", {"to": "+15551234567", "body": "On my way"})
    assert call["status"] == "pending"
    card = phone.card("On my way")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".card-title")).to_have_text("Send a text message")
    if button == "Sent":
        await card.screenshot(path=artifact("browser-invocation-card.png"))
    await card.get_by_role("button", name="Open in Messages").click()
    await expect(card.locator(".card-kind")).to_have_text("Did you send it?")
    again = card.get_by_role("link", name="Open the message again")
    await expect(again).to_have_attribute("href", "sms:+15551234567?body=On%20my%20way")
    await card.get_by_role("button", name=button, exact=True).click()
    view = await home.view(call["id"], wait=WAIT_MS / 1000)
    assert view["status"] == status


async def test_an_untrusted_sms_send_is_signed_first_and_its_card_repeats_the_binding_code(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    call = await home.invoke(
        "device__ana_phone__sms_send", {"to": "+15551234567", "body": "Yes, 7pm works"}, origin="untrusted"
    )
    assert call["status"] == "awaiting_approval"
    code = call["binding_code"]
    approval = phone.page.locator("article.approval", has_text=code)
    await expect(approval).to_be_visible(timeout=WAIT_MS)
    await expect(approval.locator(".fields")).to_contain_text("Yes, 7pm works")
    await approval.locator(".confirm").click()
    card = phone.page.locator("article.card[data-capability='sms_send']", has_text="Yes, 7pm works")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".binding-code")).to_have_text(code)
    await card.get_by_role("button", name="Open in Messages").click()
    await card.get_by_role("button", name="Sent", exact=True).click()
    view = await home.view(call["id"], wait=WAIT_MS / 1000)
    assert view["status"] == "done"
    assert view["binding_code"] == code


async def test_a_custom_capability_is_answered_by_the_persons_confirm_and_decline(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    ring = {
        "name": "ring",
        "kind": "actuator",
        "description": "Ring so the person finds the phone.",
        "params": {"seconds": {"type": "integer"}},
    }
    manifest = [{"name": "phone_actions"}, {"name": "sms_send"}, ring]
    r = await home.client.put(
        "/v1/device/capabilities", json={"capabilities": manifest}, headers=bearer(await phone.token())
    )
    assert r.status_code == 200, r.text
    r = await home.client.put(
        "/v1/users/ana/devices/ana-phone/grants", json={"grants": {"ring": True}}, headers=bearer(home.user)
    )
    assert r.status_code == 200, r.text
    for button, status in ((".confirm", "done"), (".decline", "declined")):
        call = await home.invoke("device__ana_phone__ring", {"seconds": 20})
        card = phone.page.locator("article.card[data-capability='ring']")
        await expect(card).to_be_visible(timeout=WAIT_MS)
        await expect(card.locator(".fields")).to_contain_text("20")
        await card.locator(button).click()
        assert (await home.view(call["id"], wait=WAIT_MS / 1000))["status"] == status


# -- approvals -----------------------------------------------------------------------------------------------


async def _door(home: Home) -> str:
    r = await home.client.post(
        "/v1/users/ana/devices",
        json=device_body("front-door", [DOOR], grants=["unlock_door"]),
        headers=bearer(home.operator),
    )
    assert r.status_code == 201, r.text
    return str(r.json()["device_token"])


@pytest.mark.parametrize("alg", ["ed25519", "p256"])
async def test_an_approval_signed_with_the_browsers_key_lets_the_call_go_on(
    browser: Browser, home: Home, alg: str
) -> None:
    from playwright.async_api import expect

    phone = await new_phone(browser, home)
    await pair(phone, alg=alg)
    assert (await home.device())["alg"] == alg
    door = await _door(home)
    call = await home.invoke("device__front_door__unlock_door", {"minutes": 5})
    assert call["status"] == "awaiting_approval"
    card = phone.card(call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".binding-code")).to_have_text(call["binding_code"])
    await expect(card.locator(".fields")).to_contain_text("Minutes")
    await expect(card.locator(".card-summary")).to_have_text(
        "Your assistant asks to use Front door: Unlock door."
    )
    if alg == "ed25519":
        await card.screenshot(path=artifact("browser-approval-card.png"))
        await phone.page.screenshot(path=artifact("browser-app-home.png"), full_page=True)
        await _looks_right_on_a_phone(phone, card)
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    assert (await home.view(call["id"]))["status"] == "pending"  # the signature verified
    r = await home.client.get("/v1/device/invocations", headers=bearer(door))
    assert [i["id"] for i in r.json()["invocations"]] == [call["id"]]
    decided = [e for e in await home.audit() if e["action"] == "approval.decided"]
    assert decided[-1]["data"]["decided_by"] == "device:ana-phone"
    await expect(phone.recent("Unlock door: confirmed")).to_have_count(1)
    assert phone.problems == []
    await phone.context.close()


async def _looks_right_on_a_phone(phone: Phone, card: Locator) -> None:
    """Fits a 390 px wide screen, the code is big, and the buttons are large enough for a thumb."""
    layout = await phone.page.evaluate(
        """() => ({
            overflow: document.documentElement.scrollWidth - window.innerWidth,
            code: parseFloat(getComputedStyle(document.querySelector('.approval .binding-code')).fontSize),
            buttons: [...document.querySelectorAll('.approval button')]
                .map((b) => b.getBoundingClientRect().height),
        })"""
    )
    assert layout["overflow"] <= 0
    assert layout["code"] >= 36
    assert min(layout["buttons"]) >= 48


async def test_this_wasnt_me_refuses_the_call_and_pauses_the_agent(phone: Phone, home: Home) -> None:
    from playwright.async_api import expect

    await _door(home)
    call = await home.invoke("device__front_door__unlock_door", {"minutes": 1})
    card = phone.card(call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.get_by_role("button", name="This wasn't me").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    view = await home.view(call["id"])
    assert view["status"] == "refused"
    again = await home.invoke("device__front_door__unlock_door", {"minutes": 1})
    assert again["status"] == "refused"
    assert "wasn't them" in again["reason"]
    refusals = [e for e in await home.audit() if e["action"] == "agent.paused"]
    assert len(refusals) == 1


async def test_a_declined_approval_refuses_the_call(phone: Phone, home: Home) -> None:
    from playwright.async_api import expect

    await _door(home)
    call = await home.invoke("device__front_door__unlock_door", {"minutes": 1})
    card = phone.card(call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.locator(".decline").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    view = await home.view(call["id"])
    assert view["status"] == "refused"
    assert (await home.invoke("device__front_door__unlock_door", {"minutes": 1}))[
        "status"
    ] == "awaiting_approval"


# -- offline, fallbacks and push -----------------------------------------------------------------------------


async def test_what_arrived_while_the_app_was_closed_shows_when_it_opens_and_still_signs(
    phone: Phone, home: Home, gateway: Gateway
) -> None:
    from playwright.async_api import expect

    await phone.page.close()
    await _door(home)
    action = await home.phone_action("dial", "Call Rui back", number="+351 999 888 777")
    approval = await home.invoke("device__front_door__unlock_door", {"minutes": 2})
    page = await phone.open(f"{gateway.server.url}/app/")
    await expect(page.locator("#screen-home")).to_be_visible()
    await expect(phone.card("Call Rui back")).to_be_visible(timeout=WAIT_MS)
    card = phone.card(approval["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.locator(".confirm").click()  # signed with the key kept in IndexedDB
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    assert (await home.view(approval["id"]))["status"] == "pending"
    await phone.card("Call Rui back").locator(".confirm").click()
    assert (await home.view(action["id"], wait=WAIT_MS / 1000))["status"] == "done"


async def test_on_its_websocket_the_app_gets_an_approval_live_without_the_inbox(
    browser: Browser, home: Home
) -> None:
    from playwright.async_api import expect

    phone = await new_phone(browser, home)
    await pair(phone)
    inbox: list[str] = []

    async def refuse(route: Any) -> None:
        inbox.append(route.request.url)
        await route.abort()

    await phone.page.route(re.compile(r".*/v1/inbox.*"), refuse)
    await _door(home)
    call = await home.invoke("device__front_door__unlock_door", {"minutes": 5})
    assert call["status"] == "awaiting_approval"
    card = phone.card(call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    assert (await home.view(call["id"]))["status"] == "pending"  # signed and verified
    assert phone.problems == []
    await phone.context.close()


async def test_without_websockets_the_app_long_polls_and_still_gets_its_work(
    browser: Browser, home: Home
) -> None:
    from playwright.async_api import expect

    phone = await new_phone(browser, home)
    refused: list[str] = []

    async def refuse(ws: Any) -> None:
        refused.append(ws.url)
        await ws.close(code=1011)

    await phone.page.route_web_socket(re.compile(r".*/v1/device/connect$"), refuse)
    await pair(phone, link="polling")
    call = await home.phone_action("dial", "Call the office", number="+351 210 111 222")
    card = phone.card("Call the office")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.locator(".confirm").click()
    assert (await home.view(call["id"], wait=WAIT_MS / 1000))["status"] == "done"
    await _door(home)  # an approval reaches it by the inbox's long-poll
    asked = await home.invoke("device__front_door__unlock_door", {"minutes": 5})
    approval = phone.card(asked["binding_code"])
    await expect(approval).to_be_visible(timeout=WAIT_MS)
    await approval.locator(".confirm").click()
    await expect(approval).to_have_count(0, timeout=WAIT_MS)
    assert (await home.view(asked["id"]))["status"] == "pending"
    assert len(refused) >= 2
    assert phone.problems == []
    await phone.context.close()


SUBSCRIBE_WITH = """
(subscription) => {
  window.__applicationServerKeys = [];
  PushManager.prototype.getSubscription = async function () { return null; };
  PushManager.prototype.subscribe = async function (options) {
    const key = new Uint8Array(options.applicationServerKey);
    window.__applicationServerKeys.push(
      btoa(String.fromCharCode(...key)).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, ''));
    return { toJSON: () => subscription, unsubscribe: async () => true };
  };
}
"""


async def test_the_app_subscribes_to_web_push_and_a_push_shows_a_generic_notification(
    browser: Browser, home: Home, gateway: Gateway
) -> None:
    phone = await new_phone(browser, home, permissions=["notifications"])
    # Chromium's own push service is out of reach here: the browser is given a subscription whose
    # endpoint is the loopback Web Push fake, as the push service would hand out.
    subscription = gateway.push.subscribe("ana-phone")
    await phone.context.add_init_script(f"({SUBSCRIBE_WITH})({subscription.token})")
    await pair(phone)
    assert await phone.page.evaluate("window.__applicationServerKeys") == [
        gateway.push.accounts.vapid_public_b64
    ]
    device = await home.device()
    assert device["push"] == {"kind": "webpush"}
    stored = await _push_token(gateway, device["public_key"])
    assert json.loads(stored) == json.loads(subscription.token)

    notifications = await _deliver_push(phone, gateway.server.url)
    assert notifications == [
        {"title": "tapgate", "body": "Something is waiting for you. Open tapgate to see it."}
    ]
    assert phone.problems == []
    await phone.context.close()


async def _push_token(gateway: Gateway, public_key: str) -> str:
    """The push address the gateway keeps for the device with ``public_key`` (the API never shows it)."""
    store = open_sql_store(gateway.database_url)
    try:
        for tenant in await store.tenant_ids():
            async with store.unit_of_work(tenant) as uow:
                device = await uow.devices.get("ana", "ana-phone")
            if device is not None and device.public_key == public_key and device.push is not None:
                return device.push.token
    finally:
        await store.close()
    raise AssertionError("no device with that key has a push target")


async def _deliver_push(phone: Phone, origin: str) -> list[dict[str, str]]:
    """Deliver a push to the app's service worker through the DevTools protocol, as the push service
    would, and return the notifications it shows."""
    page = phone.page
    await page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    cdp = await phone.context.new_cdp_session(page)
    scope = f"{origin}/app/"
    registrations: dict[str, str] = {}
    seen = asyncio.Event()

    def updated(event: dict[str, Any]) -> None:
        for r in event["registrations"]:
            if r["scopeURL"] == scope and not r["isDeleted"]:
                registrations[scope] = r["registrationId"]
                seen.set()

    cdp.on("ServiceWorker.workerRegistrationUpdated", updated)
    await cdp.send("ServiceWorker.enable")
    await asyncio.wait_for(seen.wait(), timeout=WAIT_MS / 1000)
    registration = {"registrationId": registrations[scope]}
    await cdp.send(
        "ServiceWorker.deliverPushMessage",
        {
            "origin": origin,
            "registrationId": registration["registrationId"],
            "data": '{"invocation_id": "x"}',
        },
    )
    # The notification appears when the worker's push handler has run: look until it is there.
    shown: list[dict[str, str]] = await page.evaluate(
        """async (ms) => {
            const registration = await navigator.serviceWorker.ready;
            const until = performance.now() + ms;
            for (;;) {
                const list = await registration.getNotifications();
                if (list.length || performance.now() > until) {
                    return list.map((n) => ({title: n.title, body: n.body}));
                }
                await new Promise((resolve) => setTimeout(resolve, 50));
            }
        }""",
        WAIT_MS,
    )
    return shown


# -- the app agrees with the server --------------------------------------------------------------------------


async def test_the_app_signs_the_same_text_as_the_server_and_verifies_the_vectors(
    browser: Browser, home: Home, gateway: Gateway
) -> None:
    vectors = json.loads((Path(__file__).parent / "data" / "test-vectors.json").read_text())
    phone = await new_phone(browser, home)
    await phone.page.goto(f"{gateway.server.url}/app/")
    results = await phone.page.evaluate(
        """async (vectors) => {
            const { signedText } = await import('/app/signing.js');
            const approval = { ...vectors.approval, sign: vectors.sign };
            const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const out = [];
            for (const c of vectors.cases) {
                const text = signedText(approval, c.decision);
                const algorithm = c.alg === 'ed25519'
                    ? { name: 'Ed25519' } : { name: 'ECDSA', namedCurve: 'P-256' };
                const key = await crypto.subtle.importKey(
                    'spki', bytes(c.public_key), algorithm, false, ['verify']);
                const signature = bytes(c.alg === 'ed25519' ? c.signature : c.signature_raw);
                const verify = c.alg === 'ed25519' ? { name: 'Ed25519' } : { name: 'ECDSA', hash: 'SHA-256' };
                const data = new TextEncoder().encode(text);
                const verifies = await crypto.subtle.verify(verify, key, signature, data);
                out.push({ same: text === c.payload, verifies });
            }
            return out;
        }""",
        vectors,
    )
    assert len(results) == len(vectors["cases"]) >= 4
    assert all(r == {"same": True, "verifies": True} for r in results), results
    await phone.context.close()


async def test_an_agents_notice_shows_on_the_app_as_a_line_in_generic_words(phone: Phone, home: Home) -> None:
    from playwright.async_api import expect

    body = {"event": "run.finished", "data": {"run_id": "r-7"}, "ui": {"title": "Backup", "body": "All done"}}
    r = await home.client.post("/v1/notices", json=body, headers=bearer(home.agent))
    assert r.status_code == 202 and phone.device_id in r.json()["delivered_to"], r.text
    line = phone.page.locator("#notices li")
    await expect(line).to_have_text("A run has finished.", timeout=WAIT_MS)  # notice_text is off here
    await expect(line).to_have_attribute("data-event", "run.finished")
    await phone.page.reload()  # a new link: the notice it already carried does not come again
    await expect(phone.page.locator("#link-state")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    r = await home.client.post("/v1/notices", json={"event": "goal.blocked"}, headers=bearer(home.agent))
    assert r.status_code == 202, r.text
    await expect(phone.page.locator("#notices li")).to_have_text(
        ["A goal is waiting for you."], timeout=WAIT_MS
    )


async def test_a_card_stays_when_the_app_looks_for_work_again_while_its_call_is_held(
    phone: Phone, home: Home
) -> None:
    """The device's fetch lists work to take, not every open call: a call its link (or an earlier poll)
    already handed over is left out for redelivery_seconds. A look for work (the page shown again, the
    network back, a push) must not take the person's card away in the middle of their answer."""
    from playwright.async_api import expect

    call = await home.invoke("device__ana_phone__sms_send", {"to": "+15551234567", "body": "Held card"})
    card = phone.card("Held card")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.get_by_role("button", name="Open in Messages").click()
    await expect(card.locator(".card-kind")).to_have_text("Did you send it?")
    async with phone.page.expect_response(lambda r: r.url.endswith("/v1/device/invocations")) as fetched:
        await phone.page.evaluate("window.dispatchEvent(new Event('online'))")  # the app looks again
    assert (await (await fetched.value).json())["invocations"] == []  # the held call is not handed again
    await expect(card.locator(".card-kind")).to_have_text("Did you send it?")
    await card.get_by_role("button", name="Sent", exact=True).click()
    assert (await home.view(call["id"], wait=WAIT_MS / 1000))["status"] == "done"
