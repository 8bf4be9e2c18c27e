"""Approvers: only a device that declares ``approvals`` and that the person granted it to receives and
signs the person's approvals (an agent's call to another device, a new device's pairing, a console
sign-in, a grant); a device with ``confirm`` on its own capability also answers the calls to itself. And a
device never raises its own grants: what it marks ``granted: true`` waits for an approver's signature.
Over the HTTP API, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.approvals import sign_decision, signed_text
from tapgate.domain.events import TOOLS_CHANGED
from tapgate.gateway import Gateway
from tapgate.services import events
from tests.conftest import asgi_client, tenant_name
from tests.world import LAMP, Key, World, bearer, device_body, new_key

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
CONFIRMED_LAMP = LAMP | {"confirm": True}
DOOR = {
    "name": "unlock_door",
    "kind": "actuator",
    "description": "Unlock the front door.",
    "params": {"note": {"type": "string", "description": "Who it is for"}},
    "confirm": True,
}
SECRET_NOTE = "the courier with parcel 4821"
SMS = {"name": "sms_send"}


@contextlib.asynccontextmanager
async def _home(engine: str, request: pytest.FixtureRequest, clock: FrozenClock) -> AsyncIterator[Home]:
    url = (
        request.getfixturevalue("sqlite_url")
        if engine == "sqlite"
        else request.getfixturevalue("postgres").app_url
    )
    config = Settings(database_url=url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(config, clock) as client:
        yield await Home(await World(client, tenant=tenant_name()).start()).build()


class Home:
    """ana with her phone (an approver, with a push route), a desk lamp (set_light with confirm, a push
    route, no approvals) and a front door (confirm); her user and agent tokens."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.keys: dict[str, Key] = {"ana-phone": new_key(), "desk-lamp": new_key(), "front-door": new_key()}
        self.tokens: dict[str, str] = {}

    async def build(self) -> Home:
        w = self.world
        self.tokens["user"] = await w.person("ana")
        self.tokens["agent"] = await w.agent("ana")
        push = {"kind": "fcm", "token": "T"}
        self.tokens["ana-phone"] = await w.enrol(
            "ana", device_body("ana-phone", [], self.keys["ana-phone"], grants=[], push=push)
        )
        self.tokens["desk-lamp"] = await w.enrol(
            "ana",
            device_body(
                "desk-lamp", [CONFIRMED_LAMP], self.keys["desk-lamp"], grants=["set_light"], push=push
            ),
        )
        self.tokens["front-door"] = await w.enrol(
            "ana",
            device_body("front-door", [DOOR], self.keys["front-door"], kind="door", grants=["unlock_door"]),
        )
        return self

    @property
    def gateway(self) -> Gateway:
        return self.world.client.app.state.gateway  # type: ignore[attr-defined,no-any-return]

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        r = await self.world.client.post(
            "/v1/invocations",
            json={"tool": tool, "arguments": arguments},
            headers=bearer(self.tokens["agent"]),
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def inbox(self, token: str) -> list[dict[str, Any]]:
        r = await self.world.client.get("/v1/inbox", headers=bearer(self.tokens[token]))
        assert r.status_code == 200, r.text
        return list(r.json()["approvals"])

    async def sign(self, approval: dict[str, Any], device: str, decision: str = "approved") -> Any:
        sign = approval["sign"]
        text = signed_text(
            sign["format"],
            approval["id"],
            decision,
            approval["kind"],
            approval["subject"],
            sign["action_sha256"],
            sign["challenge"],
            sign["expires_at"],
        )
        body = {"decision": decision, "signature": sign_decision(self.keys[device].private, text)}
        return await self.world.client.post(
            f"/v1/approvals/{approval['id']}", json=body, headers=bearer(self.tokens[device])
        )

    async def redeclare(self, device: str, capabilities: list[dict[str, Any]]) -> dict[str, Any]:
        r = await self.world.client.put(
            "/v1/device/capabilities",
            json={"capabilities": capabilities},
            headers=bearer(self.tokens[device]),
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def tools(self) -> list[str]:
        return await self.world.tool_names(self.tokens["agent"])

    async def journal(self, action: str) -> list[dict[str, Any]]:
        r = await self.world.client.get("/v1/audit?limit=1000", headers=bearer(self.world.operator))
        return [e for e in r.json()["entries"] if e["action"] == action]

    async def pushed_to(self, approval_id: str) -> set[str]:
        """The devices an approval's push went to."""
        async with self.gateway.store.unit_of_work(self.world.tenant) as uow:
            uids = {i.device_uid for i in await uow.outbox.for_subject(approval_id)}
            return {d.device_id for d in await uow.devices.list("ana") if d.device_uid in uids}

    async def tools_changed(self) -> list[dict[str, Any]]:
        caller = await self.gateway.authenticate(self.tokens["agent"])
        found = await events.read(self.gateway.ctx, caller, 0)
        return [dict(e.data) for e in found if e.type == TOOLS_CHANGED]


# Any device is a full approver: no longer.


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_lamp_never_sees_another_devices_cards(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        call = await home.call("device__front_door__unlock_door", note=SECRET_NOTE)
        assert call["status"] == "awaiting_approval"
        started = await home.world.client.post(
            "/v1/users/ana/pairings", json={}, headers=bearer(home.tokens["user"])
        )
        claim = {"code": started.json()["code"], **device_body("tablet", [])}
        assert (await home.world.client.post("/v1/pair", json=claim)).status_code == 201

        cards = await home.inbox("ana-phone")
        assert {c["kind"] for c in cards} == {"unlock_door", "device_pair"}
        assert await home.inbox("desk-lamp") == []
        # The door confirms its own unlock_door: it sees that card, and nothing else.
        assert [c["kind"] for c in await home.inbox("front-door")] == ["unlock_door"]
        r = await home.world.client.get("/v1/inbox", headers=bearer(home.tokens["desk-lamp"]))
        assert SECRET_NOTE not in r.text
        for card in cards:
            assert await home.pushed_to(card["id"]) == {"ana-phone"}
        assert {c["id"] for c in await home.inbox("user")} == {c["id"] for c in cards}  # the person: all


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_lamps_signature_on_another_devices_call_is_refused_and_the_call_waits(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        call = await home.call("device__front_door__unlock_door", note=SECRET_NOTE)
        [card] = await home.inbox("ana-phone")

        r = await home.sign(card, "desk-lamp")

        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "signature_refused"
        assert [c["id"] for c in await home.inbox("ana-phone")] == [card["id"]]  # still pending
        view = await home.world.client.get(
            f"/v1/invocations/{call['id']}", headers=bearer(home.tokens["agent"])
        )
        assert view.json()["status"] == "awaiting_approval"
        [refused] = await home.journal("approval.refused")
        assert refused["reason"] == "the device does not approve for the person"
        assert refused["actor"] == "device:ana/desk-lamp"
        assert (await home.sign(card, "ana-phone")).status_code == 200


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_device_with_confirm_on_its_own_capability_signs_the_calls_to_itself_but_not_another(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        own = await home.call("device__desk_lamp__set_light", on=True)
        other = await home.call("device__front_door__unlock_door", note="the plumber")
        [mine] = await home.inbox("desk-lamp")
        assert mine["kind"] == "set_light" and mine["subject"] == "desk-lamp"
        assert await home.pushed_to(mine["id"]) == {"ana-phone", "desk-lamp"}
        [doors] = await home.inbox("front-door")
        assert doors["subject"] == "front-door"

        assert (await home.sign(doors, "desk-lamp")).status_code == 403
        assert (await home.sign(mine, "front-door")).status_code == 403
        r = await home.sign(mine, "desk-lamp")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "approved"
        for invocation, status in ((own, "pending"), (other, "awaiting_approval")):
            view = await home.world.client.get(
                f"/v1/invocations/{invocation['id']}", headers=bearer(home.tokens["agent"])
            )
            assert view.json()["status"] == status


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_lamp_cannot_vouch_for_a_new_device(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        started = await home.world.client.post(
            "/v1/users/ana/pairings", json={}, headers=bearer(home.tokens["user"])
        )
        claim = {"code": started.json()["code"], **device_body("intruder", [])}
        claimed = (await home.world.client.post("/v1/pair", json=claim)).json()
        [card] = await home.inbox("ana-phone")
        assert card["kind"] == "device_pair"

        r = await home.sign(card, "desk-lamp")

        assert r.status_code == 403, r.text
        shown = await home.world.client.get(
            f"/v1/pairings/{started.json()['pairing_id']}", headers=bearer(home.tokens["user"])
        )
        assert shown.json()["status"] == "awaiting_consent"
        heartbeat = await home.world.client.post(
            "/v1/device/heartbeat", headers=bearer(claimed["device_token"])
        )
        assert heartbeat.status_code == 403  # still waiting: not let in
        assert [c["id"] for c in await home.inbox("ana-phone")] == [card["id"]]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_lamp_never_signs_a_console_in(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        sign_in, _ = await home.gateway.start_console_sign_in(home.world.tenant, "a browser", "192.0.2.7")
        asked = f"/v1/console/sign-ins/{sign_in.sign_in_id}/ask"

        r = await home.world.client.post(asked, headers=bearer(home.tokens["desk-lamp"]))
        assert r.status_code == 403, r.text
        assert "approves for you" in r.json()["error"]["message"]

        r = await home.world.client.post(asked, headers=bearer(home.tokens["ana-phone"]))
        assert r.status_code == 201, r.text
        card = r.json()
        assert await home.inbox("desk-lamp") == []
        refused = await home.sign(card, "desk-lamp")
        assert refused.status_code == 403, refused.text
        assert [c["id"] for c in await home.inbox("ana-phone")] == [card["id"]]
        assert (await home.sign(card, "ana-phone")).status_code == 200


# A device restores a lost grant in two requests: no longer.


@pytest.mark.parametrize("engine", ENGINES)
async def test_the_two_request_grant_restore_leaves_the_tool_ungranted_and_asks_the_person(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        lowered = [LAMP | {"granted": True}]  # confirm dropped, the grant claimed
        assert "device__desk_lamp__set_light" in await home.tools()

        first = await home.redeclare("desk-lamp", lowered)
        second = await home.redeclare("desk-lamp", lowered)

        assert "device__desk_lamp__set_light" not in await home.tools()
        for answer in (first, second):
            assert answer["grants_asked"] == ["set_light"]
            assert "waiting for the person" in answer["note"]
            [granted] = [c["granted"] for c in answer["device"]["capabilities"] if c["name"] == "set_light"]
            assert granted is False
        [card] = await home.inbox("ana-phone")  # asked once, however often it declares
        assert card["kind"] == "grant" and card["subject"] == "desk-lamp"
        assert card["arguments"]["capability"]["name"] == "set_light"
        assert card["arguments"]["capability"]["confirm"] is False
        fields = {f["label"]: f["value"] for f in card["preview"]["fields"]}
        assert fields["Asks you before each call"] == "no"
        assert await home.pushed_to(card["id"]) == {"ana-phone"}
        refused = await home.call("device__desk_lamp__set_light", on=True)
        assert refused["status"] == "refused"
        assert (await home.sign(card, "desk-lamp")).status_code == 403  # it cannot grant itself either
        assert "device__desk_lamp__set_light" not in await home.tools()


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_self_granted_sms_send_is_no_tool_until_an_approver_signs_its_grant(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        answer = await home.redeclare("desk-lamp", [CONFIRMED_LAMP, SMS | {"granted": True}])

        assert answer["grants_asked"] == ["sms_send"]
        assert "device__desk_lamp__sms_send" not in await home.tools()
        [card] = await home.inbox("ana-phone")
        assert card["kind"] == "grant"
        assert card["arguments"]["capability"]["name"] == "sms_send"
        assert await home.inbox("desk-lamp") == []

        r = await home.sign(card, "ana-phone")

        assert r.status_code == 200, r.text
        assert "device__desk_lamp__sms_send" in await home.tools()
        assert (await home.tools_changed())[-1] == {"change": "grants", "device_id": "desk-lamp"}
        [changed] = await home.journal("grants.changed")
        assert changed["actor"] == "device:ana/ana-phone" and changed["data"]["granted"] == "sms_send"
        assert await home.inbox("ana-phone") == []


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_denied_or_outdated_grant_request_changes_nothing(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        await home.redeclare("desk-lamp", [CONFIRMED_LAMP, SMS | {"granted": True}])
        [card] = await home.inbox("ana-phone")
        r = await home.sign(card, "ana-phone", "denied")
        assert r.status_code == 200, r.text
        assert "device__desk_lamp__sms_send" not in await home.tools()

        wide = LAMP | {"params": LAMP["params"] | {"raw": {"type": "string"}}}
        await home.redeclare("desk-lamp", [wide | {"granted": True}])
        [asked] = await home.inbox("ana-phone")
        await home.redeclare("desk-lamp", [wide | {"confirm": True}])  # changed again: the request is moot
        assert await home.inbox("ana-phone") == []
        r = await home.sign(asked, "ana-phone")
        assert r.status_code == 409, r.text
        assert "device__desk_lamp__set_light" not in await home.tools()


@pytest.mark.parametrize("engine", ENGINES)
async def test_with_no_approver_a_self_marked_grant_stays_ungranted_until_the_person_grants_it(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        r = await home.world.client.put(
            "/v1/users/ana/devices/ana-phone/grants",
            json={"grants": {"approvals": False}},
            headers=bearer(home.tokens["user"]),
        )
        assert r.status_code == 200, r.text

        answer = await home.redeclare("desk-lamp", [CONFIRMED_LAMP, SMS | {"granted": True}])

        assert answer["grants_asked"] == [] and answer["grants_not_asked"] == ["sms_send"]
        assert "console" in answer["note"]
        assert await home.inbox("user") == []
        assert "device__desk_lamp__sms_send" not in await home.tools()
        r = await home.world.client.put(
            "/v1/users/ana/devices/desk-lamp/grants",
            json={"grants": ["sms_send"]},
            headers=bearer(home.tokens["user"]),
        )
        assert r.status_code == 200, r.text
        assert "device__desk_lamp__sms_send" in await home.tools()


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_grant_request_nobody_answered_in_time_is_asked_again(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _home(engine, request, clock) as home:
        await home.redeclare("desk-lamp", [CONFIRMED_LAMP, SMS | {"granted": True}])
        [first] = await home.inbox("ana-phone")
        clock.advance(3601)  # approval_sign_ttl_seconds: the request ended unanswered

        answer = await home.redeclare("desk-lamp", [CONFIRMED_LAMP, SMS | {"granted": True}])

        assert answer["grants_asked"] == ["sms_send"]
        [again] = await home.inbox("ana-phone")
        assert again["id"] != first["id"] and again["kind"] == "grant"
        assert (await home.sign(first, "ana-phone")).status_code in (409, 410)
        assert "device__desk_lamp__sms_send" not in await home.tools()
