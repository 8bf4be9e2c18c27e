"""The person's console in headless Chromium against a real gateway: signed in by the browser phone app,
steered by keyboard alone, and scanned by axe-core.

One profile is the paired phone (the browser app at /app), another the computer showing /console.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import pytest
import pytest_asyncio

from tests import test_browser_app as app
from tests.test_browser_app import WAIT_MS, Gateway, Home, Phone, artifact, new_phone, pair
from tests.world import LAMP, bearer, device_body

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

pytestmark = pytest.mark.asyncio(loop_scope="module")

# The browser app's gateway, Chromium and person, shared with its tests' module.
gateway, browser, home = app.gateway, app.browser, app.home

PAGES = ("devices", "approvals", "calls", "agents", "audit", "sessions")


@dataclass
class Console:
    page: Page
    problems: list[str]

    async def goto(self, name: str) -> None:
        await self.page.goto(self.page.url.split("/console", 1)[0] + f"/console/{name}")


def _tenant(home: Home) -> str:
    return home.operator.split("_")[1]


async def _signed_in(
    browser: Browser, home: Home, phone: Phone, gateway: Gateway, user_agent: str | None = None
) -> Console:
    """The computer opens /console, the phone scans its code (opens its link) and approves on its card."""
    from playwright.async_api import expect

    extra = {"user_agent": user_agent} if user_agent else {}
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, **extra)
    page = await context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda m: (
            problems.append(m.text) if "Content Security Policy" in m.text or "Refused" in m.text else None
        ),
    )
    await page.goto(f"{gateway.server.url}/console/sign-in?tenant={_tenant(home)}")
    await expect(page.locator("h1")).to_have_text("Sign in with your phone")
    await page.screenshot(path=artifact("console-sign-in.png"))
    link = re.search(r"tapgate device login '([^']+)'", await page.content())
    assert link is not None
    await phone.page.goto(link.group(1))
    card = phone.page.locator("article.card", has_text="Console login")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    code = page.locator("#sign-in-code")
    await expect(code).to_be_visible(timeout=WAIT_MS)
    await expect(card).to_contain_text(await code.inner_text())  # the person compares the codes
    await card.locator(".confirm").click()
    await expect(page).to_have_url(re.compile(r"/console/devices$"), timeout=WAIT_MS)
    return Console(page, problems)


@pytest_asyncio.fixture(loop_scope="module")
async def phone(browser: Browser, home: Home) -> AsyncIterator[Phone]:
    paired = await new_phone(browser, home)
    await pair(paired)
    yield paired
    await paired.context.close()


async def test_the_phone_signs_the_person_in_and_the_console_steers_grants_pauses_and_history(
    browser: Browser,
    home: Home,
    phone: Phone,
    gateway: Gateway,
) -> None:
    from playwright.async_api import expect

    console = await _signed_in(browser, home, phone, gateway)
    page = console.page
    await expect(page.locator("main")).to_contain_text("Ana's phone")
    tools = await home.client.get("/v1/tools", headers=bearer(home.agent))
    assert "sms_send" in tools.text

    # a grant switched off is a tool the agent no longer has
    await page.get_by_role("switch", name="sms_send").uncheck()
    await page.get_by_role("button", name="Save grants").click()
    await expect(page.locator(".said")).to_have_text("Grants saved.")
    tools = await home.client.get("/v1/tools", headers=bearer(home.agent))
    assert "sms_send" not in tools.text

    # Pause all agents: every call refused until resumed
    await page.get_by_role("button", name="Pause all agents").click()
    await expect(page.locator("#paused-state")).to_have_text("All agents paused")
    r = await home.client.post(
        "/v1/invocations",
        json={"tool": "phone_action", "arguments": {"action": "flashlight", "on": True}},
        headers=bearer(home.agent),
    )
    assert r.json()["reason"] == "[deny] paused by the person"
    await page.get_by_role("button", name="Resume agents").click()
    await expect(page.locator(".said")).to_have_text("Agents may call again.")

    # history and audit
    await console.goto("calls")
    await expect(page.locator("tbody")).to_contain_text("paused by the person")
    await console.goto("audit")
    await expect(page.locator("#chain-state")).to_contain_text("The journal verifies")
    await expect(page.locator("tbody")).to_contain_text("agents.paused")
    assert console.problems == []
    await page.context.close()


async def test_a_second_device_is_paired_from_the_console(
    browser: Browser,
    home: Home,
    phone: Phone,
    gateway: Gateway,
) -> None:
    from playwright.async_api import expect

    console = await _signed_in(browser, home, phone, gateway)
    page = console.page
    await page.get_by_role("button", name="Pair a new device").click()
    await expect(page.locator("h1")).to_have_text("Pair a new device")
    url = await page.locator("code.url").inner_text()
    code = url.split("#pair=", 1)[1]
    claimed = await home.client.post("/v1/pair", json=device_body("desk-lamp", [LAMP]) | {"code": code})
    assert claimed.status_code == 201, claimed.text
    comparison = claimed.json()["comparison_code"]
    field = page.get_by_label("Comparison code shown on the new device")
    await expect(field).to_be_visible(timeout=WAIT_MS)
    await page.screenshot(path=artifact("console-pairing.png"))
    await field.fill(comparison)
    await page.get_by_role("button", name="Let it in").click()
    outcome = page.locator("#pairing-state, .problem")
    await expect(outcome.first).to_contain_text(re.compile("Paired|approve", re.IGNORECASE), timeout=WAIT_MS)
    assert console.problems == []
    await page.context.close()


async def test_every_console_page_works_by_keyboard_alone_and_passes_axe(
    browser: Browser,
    home: Home,
    phone: Phone,
    gateway: Gateway,
) -> None:
    from axe_playwright_python.async_playwright import Axe
    from playwright.async_api import expect

    console = await _signed_in(browser, home, phone, gateway)
    page = console.page
    axe = Axe()
    for name in PAGES:
        await console.goto(name)
        await expect(page.locator("h1")).to_be_visible()
        results = await axe.run(page)
        serious = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
        assert serious == [], (name, results.generate_snapshot())
        await page.screenshot(path=artifact(f"console-{name}.png"), full_page=True)
        # keyboard only: from the top, Tab reaches the skip link, every page of the menu, and the switch
        reached: list[str] = []
        await page.keyboard.press("Tab")
        for _ in range(40):
            reached.append(
                await page.evaluate(
                    "() => (document.activeElement.innerText || document.activeElement.value || '').trim()"
                )
            )
            await page.keyboard.press("Tab")
        assert reached[0] == "Skip to content"
        for label in ("Devices", "Approvals", "Calls", "Agents", "Audit", "Sessions", "Pause all agents"):
            assert label in reached, (name, label, reached)
        # and Enter on a menu entry goes there
        await page.keyboard.press("Shift+Tab")
    await console.goto("devices")
    await page.keyboard.press("Tab")  # skip link
    for _ in range(4):  # Devices, Approvals, Calls, Agents
        await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(re.compile(r"/console/agents$"))
    assert console.problems == []
    await page.context.close()


RELAYED = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/537.36 Chrome/126.0 Safari/537.36 Ana's MacBook"
)


async def test_the_phones_card_says_where_the_sign_in_came_from_not_what_the_browser_calls_itself(
    browser: Browser,
    home: Home,
    phone: Phone,
    gateway: Gateway,
) -> None:
    from playwright.async_api import expect

    console = await _signed_in(browser, home, phone, gateway, user_agent=RELAYED)
    shown = phone.page.locator("#recent li", has_text="Console login")
    await expect(shown.first).to_be_visible(timeout=WAIT_MS)
    await console.page.context.close()
    # the next sign-in's card, read before it is answered
    context = await browser.new_context(user_agent=RELAYED)
    page = await context.new_page()
    await page.goto(f"{gateway.server.url}/console/sign-in?tenant={_tenant(home)}")
    link = re.search(r"tapgate device login '([^']+)'", await page.content())
    assert link is not None
    await phone.page.goto(link.group(1))
    card = phone.page.locator("article.card", has_text="Console login")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card).to_contain_text("on this phone's network (127.0.0.1)")
    await expect(card).to_contain_text("Chrome on macOS")
    assert "MacBook" not in await card.inner_text()
    await phone.page.screenshot(path=artifact("console-login-card.png"))
    await card.locator(".decline").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    await context.close()


async def test_a_page_on_another_origin_cannot_sign_the_browser_in_or_post_a_console_form(
    browser: Browser,
    home: Home,
    gateway: Gateway,
) -> None:
    """The login CSRF: another site's page posts an operator's one-time link of the attacker's own
    account, then the sign-in finish form, in the victim's browser. Neither signs the browser in."""
    from playwright.async_api import Route, expect

    r = await home.client.post("/v1/users", json={"user_id": "mallory"}, headers=bearer(home.operator))
    assert r.status_code == 201, r.text
    link = await _operator_link(gateway, home, "mallory")
    context = await browser.new_context()
    posted: list[str] = []

    async def attacker(route: Route) -> None:
        target = (
            link if route.request.url.endswith("/link") else f"{gateway.server.url}/console/sign-in/finish"
        )
        body = (
            f'<!doctype html><form method="post" action="{target}"><input name="x" value="1"></form>'
            "<script>document.forms[0].submit()</script>"
        )
        await route.fulfill(status=200, content_type="text/html", body=body)

    await context.route("http://attacker.test/**", attacker)
    page = await context.new_page()
    page.on("request", lambda request: posted.append(request.url) if request.method == "POST" else None)
    for path in ("/link", "/finish"):
        async with page.expect_navigation(url=re.compile(r"^http://127\.0\.0\.1"), timeout=WAIT_MS):
            await page.goto(f"http://attacker.test{path}")
        assert not [c for c in await context.cookies() if c["name"] == "tapgate_console"], path
        await expect(page.locator("body")).to_contain_text("This form was sent from another site")
    assert len(posted) == 2  # both forms reached the gateway
    await page.goto(f"{gateway.server.url}/console/devices")
    await expect(page).to_have_url(re.compile(r"/console/sign-in$"))
    await context.close()
    # the link was not spent: its holder can still use it, from the gateway's own page
    async with httpx.AsyncClient(timeout=30) as own:
        used = await own.post(
            link, content=b"", headers={"content-type": "application/x-www-form-urlencoded"}
        )
    assert used.status_code == 303 and used.headers["location"] == "/console/devices"


async def _operator_link(gateway: Gateway, home: Home, user: str) -> str:
    """What `tapgate console link` prints, made beside the running server."""
    from tapgate.adapters.clock import SystemClock
    from tapgate.adapters.store.sql import open_sql_store
    from tapgate.adapters.wake.local import LocalWake
    from tapgate.services import accounts, console
    from tapgate.services.context import Context

    store = open_sql_store(gateway.database_url)
    try:
        operator = await accounts.authenticate(store, home.operator)
        token = await console.create_link(Context(store, SystemClock(), LocalWake()), operator, user)
    finally:
        await store.close()
    return f"{gateway.server.url}/console/link/{token}"
