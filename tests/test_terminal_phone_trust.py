"""The terminal phone and §15: it recomputes each approval's action hash from the exact arguments and the
preview it shows, and refuses to sign when they differ; it shows a ``device_pair`` approval like any other,
with the comparison code, and its signature lets the new device in. In process, against a live gateway."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from rich.console import Console

from tapgate.device.cards import Screen as CardScreen
from tapgate.device.handlers import load_handlers
from tapgate.device.keyfile import generate_key
from tapgate.device.phone import Phone, Request, Verdict
from tapgate.domain.approvals import Decision
from tapgate.domain.keys import KeyAlgorithm
from tests import test_terminal_phone as terminal
from tests.test_terminal_phone import TIMEOUT, Person, Refused, Screen, _done, _enrolled, _running
from tests.world import LAMP, bearer, device_body

gateway = terminal.gateway  # the terminal phone's fixtures: a live gateway, and ana on it
person = terminal.person


class Tampered(httpx.AsyncBaseTransport):
    """A path between gateway and phone that rewrites what the inbox shows and leaves the hash alone."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if request.url.path != "/v1/inbox":
            return response
        data = json.loads(await response.aread())
        for item in data["approvals"]:
            item["preview"]["fields"] = [{"label": "Harmless", "value": "switch the lamp on"}]
        return httpx.Response(response.status_code, json=data)

    async def aclose(self) -> None:
        await self._inner.aclose()


class Seen:
    """The approvals the decider was asked about, approving each."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def __call__(self, request: Request) -> Verdict:
        self.requests.append(request)
        return Verdict(Decision.APPROVED)


@asynccontextmanager
async def _phone(
    person: Person, screen: Screen, decide: Seen, transport: httpx.AsyncBaseTransport | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    key = generate_key(KeyAlgorithm.P256)
    async with httpx.AsyncClient(base_url=person.server.url, timeout=TIMEOUT + 10) as setup:
        token = await _enrolled(person, setup, key)
    client = httpx.AsyncClient(base_url=person.server.url, timeout=TIMEOUT + 10, transport=transport)
    async with client:
        phone = Phone(
            http=client,
            device_id="ana-lamp",
            token=token,
            key=key,
            connect=Refused(),
            decide_call=_done,
            decide_approval=decide,
            screen=screen,
            handlers=load_handlers("tapgate.device.examples"),
            poll_wait=5,
        )
        async with _running(phone):
            await screen.expect("long-polling instead")
            yield client


async def test_the_phone_refuses_to_sign_when_the_card_is_not_what_the_action_hash_covers(
    person: Person,
) -> None:
    screen, seen = Screen(), Seen()
    async with _phone(person, screen, seen, Tampered()):
        call = person.invoke("unplug", arguments={})
        assert call["status"] == "awaiting_approval"
        line = await screen.expect("decided apr_")
        assert "unsigned" in line and "action hash does not match" in line
    [approval] = person.inbox()
    assert approval["id"] in line  # still pending: nothing was signed
    assert person.view(call["id"])["status"] == "awaiting_approval"


async def test_the_phone_shows_a_device_pair_approval_with_its_comparison_code_and_its_signature_pairs(
    person: Person,
) -> None:
    screen, seen = Screen(), Seen()
    async with _phone(person, screen, seen):
        started = person.client.post("/v1/users/ana/pairings", json={}, headers=bearer(person.user)).json()
        claimed = person.client.post(
            "/v1/pair", json={"code": started["code"], **device_body("tablet", [LAMP])}
        )
        assert claimed.status_code == 201, claimed.text
        line = await screen.expect("approved (signed by ana-lamp)")
    [request] = seen.requests
    assert request.kind == "device_pair" and request.subject == "tablet"
    assert ("Comparison code", claimed.json()["comparison_code"]) in request.fields
    card = io.StringIO()
    CardScreen(Console(file=card, width=120)).approval(request)
    assert claimed.json()["comparison_code"] in card.getvalue()
    assert request.id in line
    shown = person.client.get(f"/v1/pairings/{started['pairing_id']}", headers=bearer(person.user)).json()
    assert shown["status"] == "confirmed"
    r = person.client.post("/v1/device/heartbeat", headers=bearer(claimed.json()["device_token"]))
    assert r.status_code == 204


async def test_the_phone_shows_a_grant_request_with_the_capabilitys_bar_and_its_signature_grants_it(
    person: Person,
) -> None:
    screen, seen = Screen(), Seen()
    async with _phone(person, screen, seen):
        enrolled = person.client.post(
            "/v1/users/ana/devices", json=device_body("hall-lamp", [LAMP]), headers=bearer(person.operator)
        )
        assert enrolled.status_code == 201, enrolled.text
        lamp = bearer(enrolled.json()["device_token"])
        r = person.client.put(
            "/v1/device/capabilities", json={"capabilities": [LAMP | {"granted": True}]}, headers=lamp
        )
        assert r.json()["grants_asked"] == ["set_light"]
        line = await screen.expect("approved (signed by ana-lamp)")
    [request] = seen.requests
    assert request.kind == "grant" and request.subject == "hall-lamp"
    assert ("Capability", "set_light") in request.fields
    assert ("Asks you before each call", "no") in request.fields
    card = io.StringIO()
    CardScreen(Console(file=card, width=160)).approval(request)
    assert "Asks you before each call" in card.getvalue() and "brightness (number)" in card.getvalue()
    assert request.id in line
    devices = person.client.get("/v1/users/ana/devices", headers=bearer(person.user)).json()["devices"]
    [hall] = [d for d in devices if d["device_id"] == "hall-lamp"]
    assert [c["granted"] for c in hall["capabilities"]] == [True]


async def test_the_phone_shows_a_mandate_with_every_bound_and_its_signature_makes_it_live(
    person: Person,
) -> None:
    screen, seen = Screen(), Seen()
    async with _phone(person, screen, seen):
        body = {
            "tools": ["device__ana_lamp__unplug"],
            "max_calls": 3,
            "per_day": 2,
            "expires_in_seconds": 3600,
            "purpose": "tidy the desk at night",
        }
        r = person.client.post("/v1/mandates", json=body, headers=bearer(person.agent))
        assert r.status_code == 202, r.text
        asked = r.json()
        line = await screen.expect("approved (signed by ana-lamp)")
    [request] = seen.requests
    assert request.kind == "mandate" and request.subject == asked["mandate_id"]
    assert ("Calls a day", "2") in request.fields and ("Purpose", "tidy the desk at night") in request.fields
    assert asked["approval_id"] in line
    r = person.client.get(f"/v1/mandates/{asked['mandate_id']}", headers=bearer(person.user))
    assert r.json()["status"] == "active"
    call = person.invoke("unplug", arguments={})
    assert call["mandate_id"] == asked["mandate_id"] and call["status"] != "awaiting_approval"
