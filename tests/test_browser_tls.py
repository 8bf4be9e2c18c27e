"""A phone on the gateway over https by a name, as `tapgate tls init` sets it up: headless Chromium whose
NSS database trusts the local CA (as a phone that installed it from /tls) and that resolves the name to
this machine (as the LAN would) installs the app's service worker, pairs, makes a passkey and approves."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import pytest_asyncio

from tests.browser import CHROMIUM, CHROMIUM_ARGS, home_trusting, require_browser, resolving_to_loopback
from tests.live import Server, free_port, new_tenant, tapgate
from tests.test_browser_app import DOOR, WAIT_MS, Home, Phone, pair
from tests.world import bearer, device_body

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext

pytestmark = pytest.mark.asyncio(loop_scope="module")

NAME = "gw.test"
# Only the gateway: its name and loopback.
NOT_THE_GATEWAY = re.compile(
    r"^(?!https?://(127\.0\.0\.1|gw\.test)[:/]|wss?://(127\.0\.0\.1|gw\.test)[:/]|blob:|data:).+"
)


@dataclass
class Deployment:
    server: Server
    operator: str
    folder: Path

    @property
    def ca(self) -> Path:
        assert self.server.ca is not None
        return self.server.ca


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    require_browser()
    folder = tmp_path_factory.mktemp("browser-tls")
    made = tapgate("init", "--dir", str(folder))
    assert made.returncode == 0, made.stderr
    port = free_port()
    config = folder / "tapgate.toml"
    issued = tapgate(
        "tls", "init", "--config", str(config), "--name", NAME, "--name", "127.0.0.1", "--port", str(port)
    )
    assert issued.returncode == 0, issued.stderr
    assert f'public_url = "https://{NAME}:{port}"' in config.read_text()
    server = Server(
        config, port=port, ca=folder / "tls" / "ca.pem", env={"TAPGATE_HTTP_PORT": str(free_port())}
    )
    server.start()
    try:
        yield Deployment(server, made.stdout.strip().splitlines()[-1], folder)
    finally:
        server.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def home(deployment: Deployment) -> AsyncIterator[Home]:
    operator = await new_tenant(f"sqlite:///{deployment.folder / 'tapgate.db'}")
    async with httpx.AsyncClient(
        base_url=deployment.server.url, timeout=30, verify=deployment.server.verify
    ) as client:
        r = await client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator))
        assert r.status_code == 201, r.text
        tokens = []
        for kind in ("user", "agent"):
            body = {"kind": kind} | ({"agent_id": "assistant"} if kind == "agent" else {})
            r = await client.post("/v1/users/ana/tokens", json=body, headers=bearer(operator))
            tokens.append(r.json()["token"])
        r = await client.post(
            "/v1/users/ana/devices",
            json=device_body("front-door", [DOOR], grants=["unlock_door"]),
            headers=bearer(operator),
        )
        assert r.status_code == 201, r.text
        r = await client.put(
            "/v1/users/ana/user-verification",
            json={"require_user_verification": True},
            headers=bearer(operator),
        )
        assert r.status_code == 204, r.text
        yield Home(client, operator, *tokens)


async def _launch(playwright: object, env: dict[str, str] | None) -> Browser:
    return await playwright.chromium.launch(  # type: ignore[attr-defined,no-any-return]
        executable_path=str(CHROMIUM),
        args=[*CHROMIUM_ARGS, resolving_to_loopback(NAME)],
        headless=True,
        env=env,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def playwright_running() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=WAIT_MS)
    async with async_playwright() as playwright:
        yield playwright


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def trusting(
    playwright_running: object, deployment: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Browser]:
    """Chromium as a phone that installed the gateway's CA."""
    browser = await _launch(
        playwright_running, home_trusting(tmp_path_factory.mktemp("chromium-home"), deployment.ca)
    )
    try:
        yield browser
    finally:
        await browser.close()


async def _context(browser: Browser) -> BrowserContext:
    context = await browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True)
    await context.route(NOT_THE_GATEWAY, lambda route: route.abort())
    return context


async def _phone(browser: Browser, home: Home) -> tuple[Phone, object, str]:
    context = await _context(browser)
    page = await context.new_page()
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
    await cdp.send("WebAuthn.enable", {"enableUI": False})
    options = {
        "protocol": "ctap2",
        "transport": "internal",
        "hasResidentKey": True,
        "hasUserVerification": True,
        "isUserVerified": True,
    }
    added = await cdp.send("WebAuthn.addVirtualAuthenticator", {"options": options})
    phone = Phone(context, page, home)
    page.on("pageerror", lambda error: phone.problems.append(f"page error: {error}"))
    return phone, cdp, str(added["authenticatorId"])


async def test_a_phone_trusting_the_local_ca_installs_the_app_pairs_makes_a_passkey_and_approves_by_name(
    trusting: Browser, home: Home, deployment: Deployment
) -> None:
    from playwright.async_api import expect

    phone, cdp, authenticator_id = await _phone(trusting, home)
    pairing = await pair(phone, consent_by=home.operator)
    assert pairing["url"].startswith(f"https://{NAME}:{deployment.server.port}/app/#pair=")
    assert phone.page.url.startswith(f"https://{NAME}:")
    # The service worker installs: the offline app and Web Push work on this origin.
    active = await phone.page.evaluate(
        "Promise.race([navigator.serviceWorker.ready.then((r) => Boolean(r.active)),"
        " new Promise((ok) => setTimeout(() => ok(false), 20000))])"
    )
    assert active is True
    # A passkey for the name.
    offer = phone.page.locator("#passkey-offer")
    await expect(offer).to_be_visible()
    await phone.page.click("#passkey-button")
    await expect(offer).to_be_hidden(timeout=WAIT_MS)
    credentials = await cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id})  # type: ignore[attr-defined]
    assert [c["rpId"] for c in credentials["credentials"]] == [NAME]
    # And an agent's call, approved with it.
    call = await home.invoke("device__front_door__unlock_door", {"minutes": 5})
    assert call["status"] == "awaiting_approval"
    card = phone.card(call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    assert (await home.view(call["id"]))["status"] == "pending"
    decided = [e for e in await home.audit() if e["action"] == "approval.decided"]
    assert decided[-1]["data"]["verified_by"] == "passkey"
    assert phone.problems == []
    await phone.context.close()


async def test_opened_at_an_ip_address_the_app_says_passkeys_need_the_name(
    trusting: Browser, home: Home
) -> None:
    from playwright.async_api import expect

    phone, _, _ = await _phone(trusting, home)
    page = phone.page
    pairing = await home.start_pairing()
    await page.goto(pairing["url"].replace(f"https://{NAME}:", "https://127.0.0.1:"))
    await page.fill("#pair-name", "Ana's phone")
    await page.fill("#pair-id", phone.device_id)
    await page.click("#pair-button")
    shown = page.locator("#comparison-code")
    await expect(shown).to_have_text(re.compile(r"^\d{3} \d{3}$"), timeout=WAIT_MS)
    consent = {"comparison_code": (await shown.inner_text()).replace(" ", ""), "approved": True}
    r = await home.client.post(
        f"/v1/pairings/{pairing['pairing_id']}/consent",
        json=consent | {"grants": ["approvals"]},
        headers=bearer(home.operator),
    )
    assert r.status_code == 200, r.text
    await expect(page.locator("#screen-home")).to_be_visible(timeout=WAIT_MS)
    state = page.locator("#passkey-state")
    await expect(state).to_contain_text(
        "Passkeys need the gateway's name, not an IP address", timeout=WAIT_MS
    )
    await expect(page.locator("#passkey-button")).to_be_hidden()
    assert phone.problems == []
    await phone.context.close()


async def test_a_browser_that_does_not_trust_the_local_ca_cannot_open_the_app(
    playwright_running: object, deployment: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from playwright.async_api import Error

    untrusting = await _launch(playwright_running, None)
    try:
        context = await _context(untrusting)
        page = await context.new_page()
        with pytest.raises(Error, match="ERR_CERT_AUTHORITY_INVALID"):
            await page.goto(f"https://{NAME}:{deployment.server.port}/app/")
    finally:
        await untrusting.close()
