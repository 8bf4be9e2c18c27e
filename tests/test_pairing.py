"""Pairing end to end over HTTP: code, QR, claim, comparison code, consent; expiry and reuse."""

from __future__ import annotations

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tests.world import LAMP, World, bearer, device_body


@pytest.fixture
async def world(device_api: httpx.AsyncClient) -> World:
    return await World(device_api).start()


async def _start(world: World, token: str) -> dict[str, str]:
    r = await world.client.post("/v1/users/ana/pairings", json={}, headers=bearer(token))
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_a_person_pairs_a_device_by_code_comparison_and_consent(world: World) -> None:
    user = await world.person("ana")
    agent = await world.agent("ana")
    started = await _start(world, user)
    assert started["url"] == f"http://127.0.0.1:8080/app/#pair={started['code']}"
    assert len(started["code"].rsplit("_", 1)[1]) == 32  # 128 random bits

    qr = await world.client.get(f"/v1/pairings/{started['pairing_id']}/qr.svg", headers=bearer(user))
    assert qr.status_code == 200
    assert qr.headers["content-type"] == "image/svg+xml"
    assert qr.text.startswith("<?xml") and "<svg" in qr.text

    claim = await world.client.post(
        "/v1/pair", json={"code": started["code"], **device_body("ana-phone", [LAMP])}
    )
    assert claim.status_code == 201, claim.text
    paired = claim.json()
    assert paired["status"] == "awaiting_consent"
    assert len(paired["comparison_code"]) == 6 and paired["comparison_code"].isdigit()
    device_token = paired["device_token"]

    # Until the person confirms, the device can do nothing and the person sees what asks to join.
    r = await world.client.post("/v1/device/heartbeat", headers=bearer(device_token))
    assert r.status_code == 403
    assert "confirm" in r.json()["error"]["message"]
    shown = (await world.client.get(f"/v1/pairings/{started['pairing_id']}", headers=bearer(user))).json()
    assert shown["status"] == "awaiting_consent"
    assert shown["device"]["device_id"] == "ana-phone"
    assert "comparison_code" not in str(shown)

    r = await world.client.post(
        f"/v1/pairings/{started['pairing_id']}/consent",
        json={"comparison_code": paired["comparison_code"], "approved": True, "grants": ["set_light"]},
        headers=bearer(user),
    )
    assert r.status_code == 200, r.text
    assert r.json()["device"]["status"] == "active"
    assert (await world.client.post("/v1/device/heartbeat", headers=bearer(device_token))).status_code == 204
    assert await world.tool_names(agent) == ["device__ana_phone__set_light"]
    actions = [
        e["action"]
        for e in (await world.client.get("/v1/audit", headers=bearer(world.operator))).json()["entries"]
    ]
    assert actions[-3:] == ["pairing.started", "pairing.claimed", "pairing.confirmed"]


async def test_the_default_grant_set_is_empty(world: World) -> None:
    user = await world.person("ana")
    agent = await world.agent("ana")
    started = await _start(world, user)
    paired = (
        await world.client.post("/v1/pair", json={"code": started["code"], **device_body("phone", [LAMP])})
    ).json()
    r = await world.client.post(
        f"/v1/pairings/{started['pairing_id']}/consent",
        json={"comparison_code": paired["comparison_code"], "approved": True},
        headers=bearer(user),
    )
    assert r.status_code == 200
    assert await world.tool_names(agent) == []


async def test_the_comparison_code_is_accepted_with_the_space_it_is_shown_with(world: World) -> None:
    user = await world.person("ana")
    started = await _start(world, user)
    paired = (
        await world.client.post("/v1/pair", json={"code": started["code"], **device_body("phone", [])})
    ).json()
    code = paired["comparison_code"]
    r = await world.client.post(
        f"/v1/pairings/{started['pairing_id']}/consent",
        json={"comparison_code": f"{code[:3]} {code[3:]}", "approved": True},
        headers=bearer(user),
    )
    assert r.status_code == 200, r.text
    assert r.json()["device"]["status"] == "active"


async def test_a_used_code_cannot_pair_again_nor_be_drawn(world: World) -> None:
    user = await world.person("ana")
    started = await _start(world, user)
    first = await world.client.post("/v1/pair", json={"code": started["code"], **device_body("phone", [])})
    assert first.status_code == 201
    again = await world.client.post("/v1/pair", json={"code": started["code"], **device_body("other", [])})
    assert again.status_code == 409
    qr = await world.client.get(f"/v1/pairings/{started['pairing_id']}/qr.svg", headers=bearer(user))
    assert qr.status_code == 410


async def test_an_expired_code_is_refused_and_an_unconfirmed_device_is_dropped(
    world: World, clock: FrozenClock
) -> None:
    user = await world.person("ana")
    late = await _start(world, user)
    clock.advance(601)
    r = await world.client.post("/v1/pair", json={"code": late["code"], **device_body("phone", [])})
    assert r.status_code == 410
    assert "expired" in r.json()["error"]["message"]

    unconfirmed = await _start(world, user)
    paired = (
        await world.client.post("/v1/pair", json={"code": unconfirmed["code"], **device_body("phone", [])})
    ).json()
    clock.advance(601)
    r = await world.client.post(
        f"/v1/pairings/{unconfirmed['pairing_id']}/consent",
        json={"comparison_code": paired["comparison_code"], "approved": True},
        headers=bearer(user),
    )
    assert r.status_code == 410
    assert (
        await world.client.post("/v1/device/heartbeat", headers=bearer(paired["device_token"]))
    ).status_code == 401
    assert (await world.client.get("/v1/users/ana/devices", headers=bearer(user))).json() == {"devices": []}


async def test_a_wrong_comparison_code_is_refused_and_five_cancel_the_pairing(world: World) -> None:
    user = await world.person("ana")
    started = await _start(world, user)
    paired = (
        await world.client.post("/v1/pair", json={"code": started["code"], **device_body("phone", [])})
    ).json()
    wrong = "000000" if paired["comparison_code"] != "000000" else "111111"
    consent = f"/v1/pairings/{started['pairing_id']}/consent"
    r = await world.client.post(
        consent, json={"comparison_code": wrong, "approved": True}, headers=bearer(user)
    )
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "comparison_mismatch"
    shown = (await world.client.get(f"/v1/pairings/{started['pairing_id']}", headers=bearer(user))).json()
    assert shown["status"] == "awaiting_consent"
    for _ in range(4):
        r = await world.client.post(
            consent, json={"comparison_code": wrong, "approved": True}, headers=bearer(user)
        )
        assert r.status_code == 403
    r = await world.client.post(
        consent, json={"comparison_code": paired["comparison_code"], "approved": True}, headers=bearer(user)
    )
    assert r.status_code == 409
    assert (
        await world.client.post("/v1/device/heartbeat", headers=bearer(paired["device_token"]))
    ).status_code == 401


async def test_a_declined_pairing_kills_the_device_token(world: World) -> None:
    user = await world.person("ana")
    started = await _start(world, user)
    paired = (
        await world.client.post("/v1/pair", json={"code": started["code"], **device_body("phone", [])})
    ).json()
    r = await world.client.post(
        f"/v1/pairings/{started['pairing_id']}/consent",
        json={"comparison_code": "000000", "approved": False},
        headers=bearer(user),
    )
    assert r.status_code == 200
    assert r.json()["device"]["status"] == "revoked"
    assert (
        await world.client.post("/v1/device/heartbeat", headers=bearer(paired["device_token"]))
    ).status_code == 401


@pytest.mark.parametrize(
    "code",
    ["", "nonsense", "tgp_acme_0123456789abcdef_" + "0" * 32, "tgp_nope_0123456789abcdef_" + "0" * 32],
)
async def test_an_unknown_code_is_404_without_saying_why(world: World, code: str) -> None:
    await world.person("ana")
    r = await world.client.post("/v1/pair", json={"code": code, **device_body("phone", [])})
    assert r.status_code == 404


async def test_another_user_cannot_see_draw_or_consent_to_a_pairing(world: World) -> None:
    user = await world.person("ana")
    bob = await world.person("bob")
    started = await _start(world, user)
    paired = (
        await world.client.post("/v1/pair", json={"code": started["code"], **device_body("phone", [])})
    ).json()
    pid = started["pairing_id"]
    assert (await world.client.get(f"/v1/pairings/{pid}", headers=bearer(bob))).status_code == 404
    assert (await world.client.get(f"/v1/pairings/{pid}/qr.svg", headers=bearer(bob))).status_code == 404
    r = await world.client.post(
        f"/v1/pairings/{pid}/consent",
        json={"comparison_code": paired["comparison_code"], "approved": True},
        headers=bearer(bob),
    )
    assert r.status_code == 404
    assert (
        await world.client.post("/v1/users/ana/pairings", json={}, headers=bearer(bob))
    ).status_code == 404


async def test_a_pairing_respects_the_device_limit(world: World) -> None:
    user = await world.person("ana")
    for i in range(10):
        await world.enrol("ana", device_body(f"d{i}", []))
    started = await _start(world, user)
    r = await world.client.post("/v1/pair", json={"code": started["code"], **device_body("phone", [])})
    assert r.status_code == 409
