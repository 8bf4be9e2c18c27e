"""The browser phone app and §15, in headless Chromium against a live gateway: it recomputes each
approval's action hash from the exact arguments and the preview on its card and refuses to sign when they
differ, and it shows a ``device_pair`` approval like any other, with the comparison code, so the person's
signature lets a new device in."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pytest

from tests import test_browser_app as app
from tests.test_browser_app import WAIT_MS, Home, Phone, _door, new_phone, pair
from tests.world import LAMP, bearer, device_body, new_key

if TYPE_CHECKING:
    from playwright.async_api import Browser, Route, WebSocketRoute

pytestmark = pytest.mark.asyncio(loop_scope="module")
gateway, home, browser, phone = app.gateway, app.home, app.browser, app.phone  # the app tests' fixtures


async def test_the_app_refuses_to_sign_a_card_that_is_not_what_the_action_hash_covers(
    browser: Browser, home: Home
) -> None:
    from playwright.async_api import expect

    phone = await new_phone(browser, home)

    async def tamper(route: Route) -> None:
        response = await route.fetch()
        body: dict[str, Any] = json.loads(await response.text())
        for item in body.get("approvals", []):
            item["preview"]["fields"] = [{"label": "Minutes", "value": "1"}]
        await route.fulfill(response=response, json=body)

    def tamper_link(ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()

        def from_server(message: str | bytes) -> None:
            frame = json.loads(message) if isinstance(message, str) else None
            if isinstance(frame, dict) and frame.get("type") == "device:approval":
                frame["approval"]["preview"]["fields"] = [{"label": "Minutes", "value": "1"}]
                message = json.dumps(frame)
            ws.send(message)

        server.on_message(from_server)

    # The card comes by the inbox's long-poll or, live, over the WebSocket: both are rewritten.
    await phone.page.route(re.compile(r".*/v1/inbox(\?.*)?$"), tamper)
    await phone.page.route_web_socket(re.compile(r".*/v1/device/connect$"), tamper_link)
    await pair(phone)
    await _door(home)
    call = await home.invoke("device__front_door__unlock_door", {"minutes": 600})
    card = phone.card(call["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.locator(".confirm").click()
    await expect(card).to_contain_text("cannot be signed safely", timeout=WAIT_MS)
    assert (await home.view(call["id"]))["status"] == "awaiting_approval"
    assert not [e for e in await home.audit() if e["action"] == "approval.decided"]
    await phone.page.unroute_all(behavior="ignoreErrors")
    assert phone.problems == []
    await phone.context.close()


async def test_the_app_shows_a_new_device_with_its_comparison_code_and_its_signature_pairs_it(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    started = await home.start_pairing()
    body = {"code": started["code"], **device_body("tablet", [LAMP], key=new_key("ed25519"))}
    claimed = await home.client.post("/v1/pair", json=body)
    assert claimed.status_code == 201, claimed.text
    code = claimed.json()["comparison_code"]
    card = phone.card(code)
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".card-title")).to_have_text("New device")
    await expect(card.locator(".fields")).to_contain_text("Comparison code")
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    shown = await home.client.get(f"/v1/pairings/{started['pairing_id']}", headers=bearer(home.user))
    assert shown.json()["status"] == "confirmed"
    beat = await home.client.post("/v1/device/heartbeat", headers=bearer(claimed.json()["device_token"]))
    assert beat.status_code == 204


async def test_the_app_shows_a_devices_grant_request_and_its_signature_grants_it(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    enrolled = await home.client.post(
        "/v1/users/ana/devices", json=device_body("hall-lamp", [LAMP]), headers=bearer(home.operator)
    )
    assert enrolled.status_code == 201, enrolled.text
    lamp = bearer(enrolled.json()["device_token"])
    r = await home.client.put(
        "/v1/device/capabilities", json={"capabilities": [LAMP | {"granted": True}]}, headers=lamp
    )
    assert r.json()["grants_asked"] == ["set_light"]
    [asked] = [
        a
        for a in (await home.client.get("/v1/inbox", headers=bearer(home.user))).json()["approvals"]
        if a["kind"] == "grant"
    ]
    card = phone.card(asked["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".card-title")).to_have_text("A device asks for a grant")
    await expect(card.locator(".fields")).to_contain_text("Asks you before each call")
    await expect(card.locator(".fields")).to_contain_text("brightness (number)")
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    devices = (await home.client.get("/v1/users/ana/devices", headers=bearer(home.user))).json()["devices"]
    [hall] = [d for d in devices if d["device_id"] == "hall-lamp"]
    assert [c["granted"] for c in hall["capabilities"]] == [True]


async def test_the_app_signs_a_mandate_lists_it_under_the_device_and_revokes_it(
    phone: Phone, home: Home
) -> None:
    from playwright.async_api import expect

    await _door(home)
    body = {
        "tools": ["device__front_door__unlock_door"],
        "max_calls": 5,
        "expires_in_seconds": 3600,
        "purpose": "let the courier in",
    }
    r = await home.client.post("/v1/mandates", json=body, headers=bearer(home.agent))
    assert r.status_code == 202, r.text
    asked = r.json()
    [item] = [
        a
        for a in (await home.client.get("/v1/inbox", headers=bearer(home.user))).json()["approvals"]
        if a["id"] == asked["approval_id"]
    ]
    card = phone.card(item["binding_code"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.locator(".fields")).to_contain_text("let the courier in")
    await expect(card.locator(".fields")).to_contain_text("Calls in all")
    await card.locator(".confirm").click()
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    listed = phone.page.locator(f'#mandates li[data-id="{asked["mandate_id"]}"]')
    await expect(listed).to_contain_text("Used 0 of 5", timeout=WAIT_MS)
    covered = await home.invoke("device__front_door__unlock_door", {"minutes": 5})
    assert covered["mandate_id"] == asked["mandate_id"]
    await listed.locator(".revoke").click()
    await expect(listed).to_have_count(0, timeout=WAIT_MS)
    r = await home.client.get(f"/v1/mandates/{asked['mandate_id']}", headers=bearer(home.user))
    assert r.json()["status"] == "revoked"
    after = await home.invoke("device__front_door__unlock_door", {"minutes": 5})
    assert after["status"] == "awaiting_approval" and after["mandate_id"] is None
    assert phone.problems == []
