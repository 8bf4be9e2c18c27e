"""The browser app's approval cards on a 390×844 phone screen, in headless Chromium against a live gateway:
each says who asks, what and why; Confirm and Decline fit on the screen without scrolling; approvals come
before the passkey box; "This wasn't me" is offered only where an agent asked.

Each test leaves a screenshot of its card in tests/artifacts/ (``card-*.png``); docs/browser-app/ holds
copies of them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from tests import test_browser_app as app
from tests.test_browser_app import WAIT_MS, Home, Phone, artifact
from tests.world import LAMP, bearer, device_body, new_key

if TYPE_CHECKING:
    from playwright.async_api import Locator

pytestmark = pytest.mark.asyncio(loop_scope="module")
gateway, home, browser, phone = app.gateway, app.home, app.browser, app.phone  # the app tests' fixtures

# A capability with six fields, each labelled, one a boolean with its own words.
SPRINKLER = {
    "name": "water_garden",
    "kind": "actuator",
    "label": "Water the garden",
    "description": "Open the garden's sprinkler valves.",
    "confirm": True,
    "params": {
        "zone": {"type": "string", "enum": ["front", "back"], "label": "Zone"},
        "minutes": {"type": "integer", "label": "Minutes"},
        "flow": {"type": "number", "label": "Flow (l/min)"},
        "start": {"type": "string", "label": "Start at"},
        "repeat": {"type": "integer", "label": "Repeat (days)"},
        "fertilise": {
            "type": "boolean",
            "label": "Fertiliser",
            "true_label": "Add fertiliser",
            "false_label": "Water only",
        },
    },
}
SIX = {"zone": "back", "minutes": 20, "flow": 6.5, "start": "21:30", "repeat": 2, "fertilise": True}


async def _on_screen(phone: Phone, card: Locator) -> dict[str, Any]:
    """Where the card's buttons are, read without scrolling the page."""
    boxes: dict[str, Any] = await card.evaluate(
        """(card) => {
            const box = (selector) => {
                const b = card.querySelector(selector);
                const r = b.getBoundingClientRect();
                return {top: r.top, bottom: r.bottom, hidden: b.hidden};
            };
            const offer = document.getElementById('passkey-offer');
            return {
                scrolled: window.scrollY,
                height: window.innerHeight,
                confirm: box('.confirm'),
                decline: box('.decline'),
                notMe: box('.not-me'),
                card: card.getBoundingClientRect().top,
                offer: offer.hidden ? null : offer.getBoundingClientRect().top,
            };
        }"""
    )
    return boxes


async def _shot(phone: Phone, name: str) -> None:
    await phone.page.evaluate("window.scrollTo(0, 0)")
    await phone.page.screenshot(path=artifact(f"card-{name}.png"))


async def test_an_approval_of_six_fields_shows_confirm_and_decline_without_scrolling(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    r = await home.client.post(
        "/v1/users/ana/devices",
        json=device_body("garden", [SPRINKLER], grants=["water_garden"]),
        headers=bearer(home.operator),
    )
    assert r.status_code == 201, r.text
    call = await home.invoke("device__garden__water_garden", SIX)
    card = phone.card(call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".card-summary")).to_have_text(
        "Your assistant asks to use Garden: Water the garden."
    )
    await expect(card.locator(".card-why")).to_have_text("Why: the device asks for a yes")
    await expect(card.locator(".card-description")).to_have_text("Open the garden's sprinkler valves.")
    await expect(card.locator(".fields dt")).to_have_count(6)
    await expect(card.locator(".fields")).to_contain_text("Add fertiliser")
    where = await _on_screen(phone, card)
    assert where["scrolled"] == 0
    for button in ("confirm", "decline"):
        assert where[button]["top"] >= 0 and where[button]["bottom"] <= where["height"], where
    assert where["offer"] is not None, "the passkey box is offered on this phone"
    assert where["card"] < where["offer"], "the approval comes before the passkey box"
    assert where["notMe"]["hidden"] is False  # an agent asked
    await _shot(phone, "call")
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)


async def test_a_text_message_card_says_it_came_from_a_message_you_received(phone: Phone, home: Home) -> None:
    from playwright.async_api import expect

    call = await home.invoke(
        "device__ana_phone__sms_send", {"to": "+15551234567", "body": "Yes, 7pm works"}, origin="untrusted"
    )
    card = phone.page.locator("article.approval", has_text=call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".card-summary")).to_have_text(
        "Your assistant asks to send a text message from Ana's phone."
    )
    await expect(card.locator(".card-why")).to_have_text("Why: it came from a message you received")
    await expect(card.locator(".fields")).to_contain_text("Message")
    await _shot(phone, "sms-send")
    await card.locator(".decline").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)


async def test_a_pairing_card_offers_no_this_wasnt_me(phone: Phone, home: Home) -> None:
    from playwright.async_api import expect

    started = await home.start_pairing()
    body = {"code": started["code"], **device_body("tablet", [LAMP], key=new_key("ed25519"))}
    claimed = await home.client.post("/v1/pair", json=body)
    assert claimed.status_code == 201, claimed.text
    card = phone.card(claimed.json()["comparison_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".card-title")).to_have_text("New device")
    await expect(card.locator(".not-me")).to_be_hidden()
    assert "wasn't me" not in await card.inner_text()
    await _shot(phone, "device-pair")
    await card.locator(".decline").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)


async def test_a_grant_card_offers_no_this_wasnt_me(phone: Phone, home: Home) -> None:
    from playwright.async_api import expect

    enrolled = await home.client.post(
        "/v1/users/ana/devices", json=device_body("hall-lamp", [LAMP]), headers=bearer(home.operator)
    )
    assert enrolled.status_code == 201, enrolled.text
    r = await home.client.put(
        "/v1/device/capabilities",
        json={"capabilities": [LAMP | {"granted": True}]},
        headers=bearer(enrolled.json()["device_token"]),
    )
    assert r.json()["grants_asked"] == ["set_light"]
    card = phone.page.locator("article.approval", has_text="A device asks for a grant")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".not-me")).to_be_hidden()
    assert "wasn't me" not in await card.inner_text()
    await _shot(phone, "grant")
    await card.locator(".decline").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)


async def test_a_console_sign_in_card_names_the_browser_and_offers_no_this_wasnt_me(
    phone: Phone, home: Home, gateway: app.Gateway
) -> None:
    from playwright.async_api import expect

    context = await phone.context.browser.new_context(  # type: ignore[union-attr]
        user_agent=(
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/131.0.0.0 Safari/537.36"
        )
    )
    page = await context.new_page()
    await page.goto(f"{gateway.server.url}/console/sign-in?tenant={home.operator.split('_')[1]}")
    link = re.search(r"tapgate device login '([^']+)'", await page.content())
    assert link is not None
    await phone.page.goto(link.group(1))
    card = phone.page.locator("article.card", has_text="Console login")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card).to_contain_text("Chrome on macOS")
    await expect(phone.page.locator("#notice")).to_be_hidden()  # the card says it: no second, stale notice
    assert "UTC" not in await card.inner_text()  # times in one format, the phone's
    await expect(card.locator(".not-me")).to_be_hidden()
    assert "wasn't me" not in await card.inner_text()
    await _shot(phone, "console-login")
    await card.locator(".decline").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    await context.close()
