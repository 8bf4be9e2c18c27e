"""Signed approvals: the person decides on a device, and only what that device's key signed counts."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.approvals import sign_decision, signed_text
from tests.conftest import asgi_client
from tests.world import LAMP, Key, World, bearer, device_body, new_key

DOOR = LAMP | {"name": "unlock_door", "description": "Unlock the front door.", "confirm": True}


@pytest.fixture
async def client(sqlite_url: str, clock: FrozenClock) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        approval_sign_ttl_seconds=60,
    )
    async with asgi_client(settings, clock) as c:
        yield c


class Home:
    """ana with a door (confirm on every call), her phone (P-256) and tablet (Ed25519); bob with a phone."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.keys: dict[str, Key] = {
            "ana-phone": new_key("p256"),
            "tablet": new_key("ed25519"),
            "bob-phone": new_key("p256"),
        }
        self.tokens: dict[str, str] = {}

    async def build(self) -> Home:
        w = self.world
        self.tokens["user"] = await w.person("ana")
        await w.person("bob")
        self.tokens["agent"] = await w.agent("ana")
        self.tokens["door"] = await w.enrol("ana", device_body("front-door", [DOOR], grants=["unlock_door"]))
        for user, device in (("ana", "ana-phone"), ("ana", "tablet"), ("bob", "bob-phone")):
            self.tokens[device] = await w.enrol(user, device_body(device, [], self.keys[device]))
        return self

    @property
    def client(self) -> httpx.AsyncClient:
        return self.world.client

    async def ask(self, **arguments: Any) -> dict[str, Any]:
        r = await self.client.post(
            "/v1/invocations",
            json={"tool": "device__front_door__unlock_door", "arguments": {"on": True, **arguments}},
            headers=bearer(self.tokens["agent"]),
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def inbox(self, token: str = "user") -> list[dict[str, Any]]:
        r = await self.client.get("/v1/inbox", headers=bearer(self.tokens[token]))
        assert r.status_code == 200, r.text
        return list(r.json()["approvals"])

    def sign(
        self,
        approval: dict[str, Any],
        decision: str,
        device: str = "ana-phone",
        raw: bool = False,
        **changes: Any,
    ) -> str:
        sign = approval["sign"] | changes
        payload = signed_text(
            sign["format"],
            changes.get("id", approval["id"]),
            decision,
            approval["kind"],
            approval["subject"],
            sign["action_sha256"],
            sign["challenge"],
            sign["expires_at"],
        )
        return sign_decision(self.keys[device].private, payload, raw=raw)

    async def decide(self, approval_id: str, token: str = "user", **body: Any) -> httpx.Response:
        return await self.client.post(
            f"/v1/approvals/{approval_id}", json=body, headers=bearer(self.tokens[token])
        )

    async def view(self, invocation_id: str) -> dict[str, Any]:
        r = await self.client.get(f"/v1/invocations/{invocation_id}", headers=bearer(self.tokens["agent"]))
        return dict(r.json())


@pytest.fixture
async def home(client: httpx.AsyncClient) -> Home:
    return await Home(await World(client).start()).build()


@pytest.mark.parametrize(("device", "raw"), [("ana-phone", False), ("ana-phone", True), ("tablet", False)])
async def test_a_signed_approval_lets_the_call_go_on_to_its_device(
    home: Home, device: str, raw: bool
) -> None:
    call = await home.ask(brightness=30)
    assert call["status"] == "awaiting_approval"
    assert len(call["binding_code"]) == 4
    [approval] = await home.inbox()
    assert approval["binding_code"] == call["binding_code"]
    assert approval["kind"] == "unlock_door"
    assert approval["subject"] == "front-door"
    assert approval["preview"] == {
        "kind": "unlock_door",
        "title": "Unlock door",
        "description": "Unlock the front door.",
        "who": "your assistant",
        "why": "the device asks for a yes",
        "fields": [{"label": "On", "value": "yes"}, {"label": "Brightness", "value": "30"}],
    }
    assert approval["prompt"] == "Your assistant asks to use Front door: Unlock door."
    assert approval["agent_asks"] is True
    assert approval["sign"]["format"] == "tapgate-approval-v1"
    assert await home.inbox(device) == [approval]  # a device reads the same inbox

    r = await home.decide(
        approval["id"],
        decision="approved",
        device_id=device,
        signature=home.sign(approval, "approved", device, raw),
    )
    assert r.json() == {"id": approval["id"], "status": "approved"}, r.text
    assert await home.inbox() == []
    assert await home.inbox("tablet") == []  # closed on every device
    assert (await home.view(call["id"]))["status"] == "pending"
    door = bearer(home.tokens["door"])
    [fetched] = (await home.client.get("/v1/device/invocations", headers=door)).json()["invocations"]
    assert fetched["id"] == call["id"]
    entries = (await home.client.get("/v1/audit", headers=bearer(home.world.operator))).json()["entries"]
    decided = [e for e in entries if e["action"] == "approval.decided"]
    assert decided[0]["data"]["decided_by"] == f"device:{device}"


async def test_a_denied_call_is_refused_with_the_persons_words(home: Home) -> None:
    call = await home.ask()
    [approval] = await home.inbox()
    r = await home.decide(
        approval["id"],
        decision="denied",
        device_id="ana-phone",
        signature=home.sign(approval, "denied"),
        message="Not while I'm away",
    )
    assert r.status_code == 200, r.text
    view = await home.view(call["id"])
    assert view["status"] == "refused"
    assert view["reason"] == "[policy] the person declined this call: Not while I'm away"


NEGATIVE = {
    "the other decision": lambda h, a: {"signature": h.sign(a, "denied")},
    "another approval": lambda h, a: {"signature": h.sign(a, "approved", id="apr_" + "0" * 32)},
    "a changed action": lambda h, a: {"signature": h.sign(a, "approved", action_sha256="0" * 64)},
    "another challenge": lambda h, a: {"signature": h.sign(a, "approved", challenge="f" * 32)},
    "another key": lambda h, a: {"signature": h.sign(a, "approved", "bob-phone")},
    "a foreign device": lambda h, a: {
        "signature": h.sign(a, "approved", "bob-phone"),
        "device_id": "bob-phone",
    },
    "an unknown device": lambda h, a: {"device_id": "nope", "signature": h.sign(a, "approved")},
    "an empty signature": lambda h, a: {"signature": ""},
    "a truncated signature": lambda h, a: {"signature": h.sign(a, "approved")[:-8]},
    "not base64": lambda h, a: {"signature": "%%%not-base64%%%"},
    "trailing bytes": lambda h, a: {
        "signature": base64.b64encode(base64.b64decode(h.sign(a, "approved")) + b"\x00").decode()
    },
    "non-minimal DER": lambda h, a: {"signature": _long_form(h.sign(a, "approved"))},
    "a raw signature of 63 bytes": lambda h, a: {
        "signature": base64.b64encode(base64.b64decode(h.sign(a, "approved", raw=True))[:63]).decode()
    },
    "an Ed25519 signature of 63 bytes": lambda h, a: {
        "device_id": "tablet",
        "signature": base64.b64encode(base64.b64decode(h.sign(a, "approved", "tablet"))[:63]).decode(),
    },
    "an Ed25519 signature of 65 bytes": lambda h, a: {
        "device_id": "tablet",
        "signature": base64.b64encode(base64.b64decode(h.sign(a, "approved", "tablet")) + b"\x00").decode(),
    },
}


def _long_form(signature: str) -> str:
    der = base64.b64decode(signature)
    return base64.b64encode(b"\x30\x81" + bytes([der[1]]) + der[2:]).decode()


@pytest.mark.parametrize("case", list(NEGATIVE))
async def test_a_refused_signature_is_403_journalled_and_leaves_the_approval_pending(
    home: Home, case: str
) -> None:
    call = await home.ask()
    [approval] = await home.inbox()
    body = {"decision": "approved", "device_id": "ana-phone"} | NEGATIVE[case](home, approval)
    r = await home.decide(approval["id"], **body)
    assert r.status_code in (403, 422), r.text
    if r.status_code == 422:  # an empty signature is no signature at all
        assert case == "an empty signature"
    else:
        assert r.json()["error"]["message"] == "The signature does not verify for this approval and decision."
    assert await home.inbox() == [approval]
    assert (await home.view(call["id"]))["status"] == "awaiting_approval"
    entries = (await home.client.get("/v1/audit", headers=bearer(home.world.operator))).json()["entries"]
    if r.status_code == 403:
        assert entries[-1]["action"] == "approval.refused"
        assert entries[-1]["subject"] == approval["id"]
    good = await home.decide(
        approval["id"], decision="approved", device_id="ana-phone", signature=home.sign(approval, "approved")
    )
    assert good.status_code == 200  # the pending approval still takes the real signature


async def test_the_device_cannot_answer_a_call_the_person_has_not_approved_yet(home: Home) -> None:
    view = await home.ask()
    assert view["status"] == "awaiting_approval"
    r = await home.client.post(
        f"/v1/device/invocations/{view['id']}/result",
        json={"status": "done"},
        headers=bearer(home.tokens["door"]),
    )
    assert r.status_code == 404  # never handed to the device: the same answer as an unknown id
    assert (await home.view(view["id"]))["status"] == "awaiting_approval"
    [approval] = await home.inbox()
    r = await home.decide(
        approval["id"], device_id="ana-phone", decision="approved", signature=home.sign(approval, "approved")
    )
    assert r.status_code == 200, r.text
    assert (await home.view(view["id"]))["status"] == "pending"


async def test_a_revoked_device_cannot_sign(home: Home) -> None:
    await home.ask()
    [approval] = await home.inbox()
    await home.client.delete("/v1/users/ana/devices/ana-phone", headers=bearer(home.world.operator))
    r = await home.decide(
        approval["id"], decision="approved", device_id="ana-phone", signature=home.sign(approval, "approved")
    )
    assert r.status_code == 403
    assert await home.inbox() == [approval]


async def test_a_signature_after_its_window_is_refused(home: Home, clock: FrozenClock) -> None:
    await home.ask()
    [approval] = await home.inbox()
    signature = home.sign(approval, "approved")
    clock.advance(61)  # the sign window (60 s here) passed
    r = await home.decide(approval["id"], decision="approved", device_id="ana-phone", signature=signature)
    assert r.status_code == 403
    entries = (await home.client.get("/v1/audit", headers=bearer(home.world.operator))).json()["entries"]
    assert entries[-1]["action"] == "approval.refused"
    assert entries[-1]["reason"] == "the signing window has passed"
    assert not any(e["action"] == "approval.decided" for e in entries)


async def test_a_decision_after_the_call_expired_is_410_and_the_approval_expires_with_it(
    home: Home, clock: FrozenClock
) -> None:
    call = await home.ask()
    [approval] = await home.inbox()
    clock.advance(301)
    view = await home.view(call["id"])
    assert view["status"] == "expired"
    r = await home.decide(
        approval["id"], decision="approved", device_id="ana-phone", signature=home.sign(approval, "approved")
    )
    assert r.status_code in (409, 410)
    assert await home.inbox() == []


async def test_a_decision_body_that_repeats_a_key_is_refused(home: Home) -> None:
    await home.ask()
    [approval] = await home.inbox()
    signature = home.sign(approval, "denied")
    body = (
        f'{{"decision": "denied", "device_id": "ana-phone", "signature": "{signature}", '
        '"decision": "approved"}'
    )
    r = await home.client.post(
        f"/v1/approvals/{approval['id']}",
        content=body.encode(),
        headers=bearer(home.tokens["user"]) | {"content-type": "application/json"},
    )
    assert r.status_code == 400
    assert "repeats the key 'decision'" in r.json()["error"]["message"]
    assert await home.inbox() == [approval]


async def test_a_decision_body_nested_deeper_than_the_parser_goes_is_400_not_500(home: Home) -> None:
    await home.ask()
    [approval] = await home.inbox()
    r = await home.client.post(
        f"/v1/approvals/{approval['id']}",
        content=b'{"a":' * 3000 + b"1" + b"}" * 3000,
        headers=bearer(home.tokens["user"]) | {"content-type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "malformed"
    assert len(await home.inbox()) == 1  # still pending


async def test_a_user_may_decide_without_a_phone_only_where_signatures_are_not_required(home: Home) -> None:
    await home.ask()
    [approval] = await home.inbox()
    strict = await home.world.token("ana", "user", require_device_signature=True)
    home.tokens["strict"] = strict
    r = await home.decide(approval["id"], token="strict", decision="approved")
    assert r.status_code == 403
    r = await home.decide(approval["id"], token="ana-phone", decision="approved")
    assert r.status_code == 403  # a device decides by signing
    r = await home.decide(approval["id"], decision="approved")
    assert r.status_code == 200


async def test_the_operator_decides_without_a_phone_and_the_journal_says_so(home: Home) -> None:
    await home.ask()
    [approval] = await home.inbox()
    r = await home.client.post(
        f"/v1/approvals/{approval['id']}", json={"decision": "approved"}, headers=bearer(home.world.operator)
    )
    assert r.status_code == 200
    entries = (await home.client.get("/v1/audit", headers=bearer(home.world.operator))).json()["entries"]
    decided = [e for e in entries if e["action"] == "approval.decided"]
    assert decided[0]["data"]["decided_by"] == "operator (no device signature)"


async def test_another_users_device_and_token_cannot_see_or_decide(home: Home) -> None:
    await home.ask()
    [approval] = await home.inbox()
    assert await home.inbox("bob-phone") == []
    r = await home.decide(
        approval["id"],
        token="bob-phone",
        decision="approved",
        signature=home.sign(approval, "approved", "bob-phone"),
    )
    assert r.status_code == 404


async def test_concurrent_approve_and_deny_record_exactly_one_decision(home: Home) -> None:
    for _ in range(10):
        call = await home.ask()
        approval = next(a for a in await home.inbox() if a["binding_code"] == call["binding_code"])
        approve, deny = await asyncio.gather(
            home.decide(
                approval["id"],
                decision="approved",
                device_id="ana-phone",
                signature=home.sign(approval, "approved"),
            ),
            home.decide(
                approval["id"],
                decision="denied",
                device_id="tablet",
                signature=home.sign(approval, "denied", "tablet"),
            ),
        )
        assert sorted((approve.status_code, deny.status_code)) == [200, 409]
        view = await home.view(call["id"])
        assert view["status"] == ("pending" if approve.status_code == 200 else "refused")
        if view["status"] == "pending":
            await home.client.post(
                f"/v1/device/invocations/{call['id']}/result",
                json={"status": "done"},
                headers=bearer(home.tokens["door"]),
            )


async def test_a_burst_of_asks_reaches_the_person_only_up_to_the_cap(home: Home) -> None:
    views = [await home.ask() for _ in range(50)]
    waiting = [v for v in views if v["status"] == "awaiting_approval"]
    refused = [v for v in views if v["status"] == "refused"]
    assert len(waiting) == 5
    assert len(refused) == 45
    assert all("already wait for the person" in str(v["reason"]) for v in refused)
    assert len(await home.inbox()) == 5


async def test_this_wasnt_me_declines_and_pauses_the_agent(home: Home, clock: FrozenClock) -> None:
    call = await home.ask()
    [approval] = await home.inbox()
    r = await home.decide(
        approval["id"],
        decision="denied",
        device_id="ana-phone",
        signature=home.sign(approval, "denied"),
        not_me=True,
    )
    assert r.status_code == 200
    assert (await home.view(call["id"]))["status"] == "refused"
    paused = await home.ask()
    assert paused["status"] == "refused"
    assert "wasn't them" in str(paused["reason"])
    clock.advance(1201)
    assert (await home.ask())["status"] == "awaiting_approval"
    entries = (await home.client.get("/v1/audit", headers=bearer(home.world.operator))).json()["entries"]
    assert any(e["action"] == "agent.paused" for e in entries)


async def test_an_approved_call_whose_grant_was_withdrawn_does_not_go_on(home: Home) -> None:
    call = await home.ask()
    [approval] = await home.inbox()
    await home.client.put(
        "/v1/users/ana/devices/front-door/grants",
        json={"grants": {"unlock_door": False}},
        headers=bearer(home.tokens["user"]),
    )
    r = await home.decide(
        approval["id"], decision="approved", device_id="ana-phone", signature=home.sign(approval, "approved")
    )
    assert r.status_code == 200
    view = await home.view(call["id"])
    assert view["status"] == "refused"
    assert view["reason"].startswith("[deny] the call is no longer allowed")


async def test_an_untrusted_turn_asks_and_an_agent_waiting_sees_the_answer(home: Home) -> None:
    await home.world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    waiting = asyncio.create_task(
        home.client.post(
            "/v1/invocations",
            json={
                "tool": "device__desk_lamp__set_light",
                "arguments": {"on": True},
                "origin": "untrusted",
                "wait": 10,
            },
            headers=bearer(home.tokens["agent"]),
        )
    )
    approval: dict[str, Any] = {}
    for _ in range(100):
        found = await home.inbox()
        if found:
            approval = found[0]
            break
        await asyncio.sleep(0.01)
    assert approval
    await home.decide(
        approval["id"], decision="denied", device_id="ana-phone", signature=home.sign(approval, "denied")
    )
    view = (await asyncio.wait_for(waiting, timeout=10)).json()
    assert view["status"] == "refused"
    assert view["reason"] == "[policy] the person declined this call"
