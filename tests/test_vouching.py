"""Vouching (DESIGN §15): with a user token alone nobody adds a device to a person who has one; a new
pairing goes in only when a device the person has signs its ``device_pair`` approval, or an operator
consents. Over the HTTP API, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.approvals import action_sha256, sign_decision, signed_text
from tapgate.domain.devices import PushTarget
from tapgate.domain.push import DEVICE_PAIRED, GENERIC_BODIES
from tapgate.gateway import Gateway
from tests.conftest import asgi_client, tenant_name
from tests.world import LAMP, Key, World, bearer, device_body, new_key

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@contextlib.asynccontextmanager
async def _world(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock, **settings: Any
) -> AsyncIterator[World]:
    url = (
        request.getfixturevalue("sqlite_url")
        if engine == "sqlite"
        else request.getfixturevalue("postgres").app_url
    )
    config = Settings(database_url=url, device_channel_enabled=True, device_sms_enabled=True, **settings)
    async with asgi_client(config, clock) as client:
        yield await World(client, tenant=tenant_name()).start()


class Ana:
    """Ana with a phone the operator enrolled (key in hand, a push target), and her user token."""

    def __init__(self, world: World, user: str, phone: str, key: Key) -> None:
        self.world, self.user, self.phone, self.key = world, user, phone, key

    @classmethod
    async def start(cls, world: World) -> Ana:
        user = await world.person("ana")
        key = new_key()
        phone = await world.enrol(
            "ana", device_body("ana-phone", [LAMP], key=key, push={"kind": "fcm", "token": "T1"})
        )
        return cls(world, user, phone, key)

    async def pair(self, key: Key | None = None, device_id: str = "tablet") -> tuple[str, dict[str, Any]]:
        """What a thief with the user token does: start a pairing and claim it with a fresh key."""
        started = await self.world.client.post("/v1/users/ana/pairings", json={}, headers=bearer(self.user))
        assert started.status_code == 201, started.text
        body = {"code": started.json()["code"], **device_body(device_id, [LAMP], key=key or new_key())}
        claimed = await self.world.client.post("/v1/pair", json=body)
        assert claimed.status_code == 201, claimed.text
        return started.json()["pairing_id"], dict(claimed.json())

    async def consent(self, pairing_id: str, code: str, token: str, approved: bool = True) -> Any:
        return await self.world.client.post(
            f"/v1/pairings/{pairing_id}/consent",
            json={"comparison_code": code, "approved": approved, "grants": ["set_light"]},
            headers=bearer(token),
        )

    async def inbox(self, token: str | None = None) -> list[dict[str, Any]]:
        r = await self.world.client.get("/v1/inbox", headers=bearer(token or self.phone))
        assert r.status_code == 200, r.text
        return list(r.json()["approvals"])

    def signature(self, approval: dict[str, Any], decision: str) -> str:
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
        return sign_decision(self.key.private, payload)

    async def decide(self, approval: dict[str, Any], decision: str, signed: bool = True) -> Any:
        body: dict[str, Any] = {"decision": decision}
        if signed:
            body |= {"device_id": "ana-phone", "signature": self.signature(approval, decision)}
        return await self.world.client.post(
            f"/v1/approvals/{approval['id']}", json=body, headers=bearer(self.user)
        )

    async def alive(self, device_token: str) -> bool:
        r = await self.world.client.post("/v1/device/heartbeat", headers=bearer(device_token))
        return r.status_code == 204

    async def journal(self) -> list[dict[str, Any]]:
        r = await self.world.client.get("/v1/audit?limit=1000", headers=bearer(self.world.operator))
        return list(r.json()["entries"])


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_stolen_user_token_cannot_pair_its_own_key_when_the_person_has_a_device(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    """The attack of issue 14: start, claim with a fresh key, consent with the code the claim returned."""
    async with _world(engine, request, clock) as world:
        ana = await Ana.start(world)
        thief = await world.token("ana", "user", require_device_signature=True)
        pairing_id, claimed = await ana.pair()

        r = await ana.consent(pairing_id, claimed["comparison_code"], thief)

        assert r.status_code == 403, r.text
        assert (
            "approve this pairing on a device that approves for you" in r.json()["error"]["message"].lower()
        )
        assert not await ana.alive(claimed["device_token"])
        r = await ana.consent(pairing_id, claimed["comparison_code"], ana.user)
        assert r.status_code == 403
        shown = await world.client.get(f"/v1/pairings/{pairing_id}", headers=bearer(ana.user))
        assert shown.json()["status"] == "awaiting_consent"
        refused = [e for e in await ana.journal() if e["action"] == "pairing.consent_refused"]
        assert len(refused) == 2 and refused[0]["outcome"] == "refused"


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_device_the_person_has_lets_the_new_one_in_by_signing_its_device_pair_approval(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _world(engine, request, clock) as world:
        ana = await Ana.start(world)
        tablet_key = new_key()
        pairing_id, claimed = await ana.pair(tablet_key)

        [approval] = await ana.inbox()
        assert [a["id"] for a in await ana.inbox(ana.user)] == [approval["id"]]
        assert approval["kind"] == "device_pair"
        assert approval["subject"] == "tablet"
        fingerprint = hashlib.sha256(base64.b64decode(tablet_key.public_b64)).hexdigest()[:16]
        assert {f["label"]: f["value"] for f in approval["preview"]["fields"]} == {
            "New device": "Tablet",
            "Device id": "tablet",
            "Kind": "phone",
            "Key fingerprint": fingerprint,
            "Comparison code": claimed["comparison_code"],
        }
        recomputed = action_sha256(
            approval["tool"],
            approval["subject"],
            approval["kind"],
            approval["arguments"],
            approval["preview"],
        )
        assert recomputed == approval["sign"]["action_sha256"]

        unsigned = await ana.decide(approval, "approved", signed=False)
        assert unsigned.status_code == 403, unsigned.text
        assert not await ana.alive(claimed["device_token"])

        r = await ana.decide(approval, "approved")
        assert r.status_code == 200, r.text
        assert await ana.alive(claimed["device_token"])
        assert await ana.inbox() == []
        shown = await world.client.get(f"/v1/pairings/{pairing_id}", headers=bearer(ana.user))
        assert shown.json()["status"] == "confirmed"
        confirmed = [e for e in await ana.journal() if e["action"] == "pairing.confirmed"]
        assert confirmed[-1]["data"]["consent"] == "device:ana-phone"
        gateway: Gateway = world.client.app.state.gateway  # type: ignore[attr-defined]
        async with gateway.store.unit_of_work(world.tenant) as uow:
            notices = [i for i in await uow.outbox.for_subject("tablet") if i.event == DEVICE_PAIRED]
        assert [n.user_id for n in notices] == ["ana"]  # to the phone, the one other device
        message = notices[0].message("ana-phone", PushTarget("fcm", "T1"))
        assert dict(message.data) == {"paired_device_id": "tablet"}
        assert message.body == GENERIC_BODIES[DEVICE_PAIRED]


@pytest.mark.parametrize("engine", ENGINES)
async def test_denying_the_device_pair_approval_cancels_the_pairing(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _world(engine, request, clock) as world:
        ana = await Ana.start(world)
        pairing_id, claimed = await ana.pair()
        [approval] = await ana.inbox()
        r = await ana.decide(approval, "denied")
        assert r.status_code == 200, r.text
        shown = await world.client.get(f"/v1/pairings/{pairing_id}", headers=bearer(ana.user))
        assert shown.json()["status"] == "declined"
        assert shown.json()["device"]["status"] == "revoked"
        assert not await ana.alive(claimed["device_token"])


async def test_an_operator_may_always_consent_and_is_journalled_as_the_one_who_did(
    request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _world("sqlite", request, clock) as world:
        ana = await Ana.start(world)
        pairing_id, claimed = await ana.pair()
        r = await ana.consent(pairing_id, claimed["comparison_code"], world.operator)
        assert r.status_code == 200, r.text
        assert await ana.alive(claimed["device_token"])
        assert await ana.inbox() == []  # the device_pair approval closed with the consent
        confirmed = [e for e in await ana.journal() if e["action"] == "pairing.confirmed"]
        assert confirmed[-1]["actor"].startswith("operator:")
        assert confirmed[-1]["data"]["consent"] == "operator"


async def test_with_device_signatures_required_a_first_pairing_needs_the_operator(
    request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _world("sqlite", request, clock, require_device_signature=True) as world:
        user = await world.person("ana")
        started = (await world.client.post("/v1/users/ana/pairings", json={}, headers=bearer(user))).json()
        body = {"code": started["code"], **device_body("ana-phone", [LAMP])}
        claimed = (await world.client.post("/v1/pair", json=body)).json()
        consent = {"comparison_code": claimed["comparison_code"], "approved": True}
        url = f"/v1/pairings/{started['pairing_id']}/consent"
        r = await world.client.post(url, json=consent, headers=bearer(user))
        assert r.status_code == 403, r.text
        assert "operator" in r.json()["error"]["message"]
        r = await world.client.post(url, json=consent, headers=bearer(world.operator))
        assert r.status_code == 200, r.text


async def test_without_a_device_and_signatures_off_the_person_consents_themselves(
    request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _world("sqlite", request, clock, require_device_signature=False) as world:
        user = await world.person("ana")
        started = (await world.client.post("/v1/users/ana/pairings", json={}, headers=bearer(user))).json()
        body = {"code": started["code"], **device_body("ana-phone", [LAMP])}
        claimed = (await world.client.post("/v1/pair", json=body)).json()
        r = await world.client.post(
            f"/v1/pairings/{started['pairing_id']}/consent",
            json={"comparison_code": claimed["comparison_code"], "approved": True},
            headers=bearer(user),
        )
        assert r.status_code == 200, r.text


async def test_pairings_waiting_for_a_voucher_do_not_use_up_the_persons_open_confirmations(
    request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _world("sqlite", request, clock, max_open_confirmations=2) as world:
        ana = await Ana.start(world)
        door = LAMP | {"name": "unlock_door", "confirm": True}
        await world.enrol("ana", device_body("front-door", [door], grants=["unlock_door"]))
        for i in range(3):
            await ana.pair(device_id=f"tablet-{i}")
        assert len(await ana.inbox()) == 3
        agent = await world.agent("ana")
        r = await world.client.post(
            "/v1/invocations",
            json={"tool": "device__front_door__unlock_door", "arguments": {"on": True}},
            headers=bearer(agent),
        )
        assert r.json()["status"] == "awaiting_approval", r.text


async def test_the_new_device_cannot_vouch_for_itself(
    request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    async with _world("sqlite", request, clock) as world:
        ana = await Ana.start(world)
        thief_key = new_key()
        pairing_id, claimed = await ana.pair(thief_key)
        [approval] = await ana.inbox(ana.user)
        sign = approval["sign"]
        text = signed_text(
            sign["format"], approval["id"], "approved", approval["kind"], approval["subject"],
            sign["action_sha256"], sign["challenge"], sign["expires_at"],
        )  # fmt: skip
        body = {
            "decision": "approved",
            "device_id": "tablet",
            "signature": sign_decision(thief_key.private, text),
        }
        for token in (ana.user, claimed["device_token"]):
            r = await world.client.post(f"/v1/approvals/{approval['id']}", json=body, headers=bearer(token))
            assert r.status_code in (401, 403), r.text
        assert not await ana.alive(claimed["device_token"])
        shown = await world.client.get(f"/v1/pairings/{pairing_id}", headers=bearer(ana.user))
        assert shown.json()["status"] == "awaiting_consent"
