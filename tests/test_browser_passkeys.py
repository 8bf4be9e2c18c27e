"""Passkeys in the browser app (DESIGN §22), in headless Chromium with its virtual authenticator.

WebAuthn needs a relying party id that is a domain, so this gateway's public_url is
``http://localhost:<port>`` (a secure context, like 127.0.0.1). The virtual authenticator is a
platform one with user verification, as a phone's: ``WebAuthn.addVirtualAuthenticator`` through the
page's DevTools session. With verification switched off the browser itself refuses the ``required``
assertion, so nothing reaches the gateway; the gateway's own refusals are in tests/test_passkeys.py.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import pytest_asyncio

from tapgate.adapters.store.migrate import migrate
from tests.browser import CHROMIUM, CHROMIUM_ARGS, require_browser
from tests.conftest import blocking
from tests.live import Server, free_port, new_tenant, write_config
from tests.test_browser_app import DOOR, WAIT_MS, Home, Phone, pair
from tests.world import bearer, device_body

if TYPE_CHECKING:
    from playwright.async_api import Browser, CDPSession

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Only this machine: localhost (the relying party) and 127.0.0.1.
NOT_LOCAL = re.compile(
    r"^(?!https?://(127\.0\.0\.1|localhost)[:/]|wss?://(127\.0\.0\.1|localhost)[:/]|blob:|data:).+"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    require_browser()
    folder = tmp_path_factory.mktemp("browser-passkeys")
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    port = free_port()
    config = write_config(folder, url, public_url=f"http://localhost:{port}")
    running = Server(config, port=port).start()
    try:
        yield running, url
    finally:
        running.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def home(server: tuple[Server, str]) -> AsyncIterator[Home]:
    running, url = server
    operator = await new_tenant(url)
    async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(server: tuple[Server, str]) -> AsyncIterator[Browser]:
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=WAIT_MS)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP localhost 127.0.0.1"],
            headless=True,
        )
        try:
            yield launched
        finally:
            await launched.close()


async def _phone(browser: Browser, home: Home, authenticator: bool = True) -> tuple[Phone, CDPSession, str]:
    context = await browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True)
    await context.route(NOT_LOCAL, lambda route: route.abort())
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
    authenticator_id = ""
    if authenticator:
        await cdp.send("WebAuthn.enable", {"enableUI": False})
        added = await cdp.send(
            "WebAuthn.addVirtualAuthenticator",
            {
                "options": {
                    "protocol": "ctap2",
                    "transport": "internal",
                    "hasResidentKey": True,
                    "hasUserVerification": True,
                    "isUserVerified": True,
                }
            },
        )
        authenticator_id = str(added["authenticatorId"])
    phone = Phone(context, page, home)
    page.on("pageerror", lambda error: phone.problems.append(f"page error: {error}"))
    return phone, cdp, authenticator_id


async def _waiting_card(home: Home, phone: Phone) -> tuple[dict[str, Any], Any]:
    from playwright.async_api import expect

    call = await home.invoke("device__front_door__unlock_door", {"minutes": 5})
    assert call["status"] == "awaiting_approval"
    card = phone.card(call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    return call, card


async def _device_passkeys(home: Home, phone: Phone) -> list[dict[str, Any]]:
    r = await home.client.get("/v1/device/passkeys", headers=bearer(await phone.token()))
    assert r.status_code == 200, r.text
    return list(r.json()["passkeys"])


async def test_pair_register_a_passkey_approve_with_verification_and_refuse_without(
    browser: Browser, home: Home
) -> None:
    from playwright.async_api import expect

    phone, cdp, authenticator_id = await _phone(browser, home)
    await pair(phone, consent_by=home.operator)  # ana has a door already: the operator lets the phone in
    offer = phone.page.locator("#passkey-offer")
    await expect(offer).to_be_visible()
    await phone.page.click("#passkey-button")
    await expect(offer).to_be_hidden(timeout=WAIT_MS)
    [registered] = await _device_passkeys(home, phone)
    credentials = await cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id})
    [held] = credentials["credentials"]
    assert held["rpId"] == "localhost"
    assert registered["credential_id"] == held["credentialId"].replace("+", "-").replace("/", "_").rstrip("=")

    # Approve: the browser asks the authenticator, which verifies the person; the gateway accepts.
    call, card = await _waiting_card(home, phone)
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    assert (await home.view(call["id"]))["status"] == "pending"
    decided = [e for e in await home.audit() if e["action"] == "approval.decided"]
    assert decided[-1]["data"]["verified_by"] == "passkey"
    assert decided[-1]["data"]["decided_by"] == "device:ana-phone"

    # Without verification the browser refuses the assertion itself: nothing is sent, the card stays.
    await cdp.send("WebAuthn.setUserVerified", {"authenticatorId": authenticator_id, "isUserVerified": False})
    call, card = await _waiting_card(home, phone)
    await card.locator(".confirm").click()
    await expect(card.locator(".card-error")).to_contain_text(
        "Your passkey was not confirmed", timeout=WAIT_MS
    )
    assert (await home.view(call["id"]))["status"] == "awaiting_approval"

    # Deny is signed and verified too.
    await cdp.send("WebAuthn.setUserVerified", {"authenticatorId": authenticator_id, "isUserVerified": True})
    await card.locator(".decline").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    assert (await home.view(call["id"]))["status"] == "refused"
    decided = [e for e in await home.audit() if e["action"] == "approval.decided"]
    assert decided[-1]["outcome"] == "denied" and decided[-1]["data"]["verified_by"] == "passkey"
    assert phone.problems == []
    await phone.context.close()


async def test_a_browser_without_a_platform_authenticator_says_so_and_what_to_do(
    browser: Browser, home: Home
) -> None:
    from playwright.async_api import expect

    phone, _, _ = await _phone(browser, home, authenticator=False)
    await pair(phone, link="live", consent_by=home.operator)
    state = phone.page.locator("#passkey-state")
    await expect(state).to_contain_text("no screen lock, fingerprint or face unlock", timeout=WAIT_MS)
    await expect(state).to_contain_text("Turn on a screen lock")
    await expect(phone.page.locator("#passkey-button")).to_be_hidden()
    # The gateway requires a passkey for ana: the answer is refused and the card says why.
    call, card = await _waiting_card(home, phone)
    await card.locator(".confirm").click()
    await expect(card.locator(".card-error")).to_contain_text("needs your passkey", timeout=WAIT_MS)
    await expect(card.locator(".card-error")).to_contain_text("This browser has none yet")
    assert (await home.view(call["id"]))["status"] == "awaiting_approval"
    assert phone.problems == []
    await phone.context.close()


async def test_a_new_passkey_can_be_set_up_later_from_this_devices_settings(
    browser: Browser, home: Home
) -> None:
    from playwright.async_api import expect

    phone, cdp, authenticator_id = await _phone(browser, home)
    await pair(phone, consent_by=home.operator)  # ana has a door already: the operator lets the phone in
    await phone.page.click("#passkey-button")
    await expect(phone.page.locator("#passkey-offer")).to_be_hidden(timeout=WAIT_MS)
    await phone.page.click("details.about summary")
    again, state = phone.page.locator("#passkey-again"), phone.page.locator("#passkey-again-state")
    await again.click()  # the phone holds it already: nothing to do
    await expect(state).to_contain_text("already holds this device's passkey", timeout=WAIT_MS)
    # The passkey is deleted from the phone (a reset, a new screen lock): set up a new one from settings.
    [old] = (await cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id}))["credentials"]
    await cdp.send(
        "WebAuthn.removeCredential",
        {"authenticatorId": authenticator_id, "credentialId": old["credentialId"]},
    )
    await again.click()
    await expect(state).to_have_text("A new passkey is set up; your answers now use it.", timeout=WAIT_MS)
    assert len(await _device_passkeys(home, phone)) == 2
    call, card = await _waiting_card(home, phone)
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    assert (await home.view(call["id"]))["status"] == "pending"
    decided = [e for e in await home.audit() if e["action"] == "approval.decided"]
    assert decided[-1]["data"]["verified_by"] == "passkey"
    assert phone.problems == []
    await phone.context.close()
