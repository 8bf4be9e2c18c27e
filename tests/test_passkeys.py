"""Passkeys (DESIGN §22): the server's own checks, with assertions crafted by a software authenticator.

The browser's side (Chromium's virtual authenticator) is in tests/test_browser_passkeys.py; here every
refusal the browser would never let through is tried: no assertion, the user-verified flag off, another
text, another credential, a replayed assertion and a counter that went back. Each is 403 and leaves the
approval pending.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.approvals import signed_text
from tests.conftest import asgi_client
from tests.passkey_authenticator import SoftAuthenticator, b64url
from tests.test_approvals import Home
from tests.world import World, bearer

RP_ID = "127.0.0.1"
ORIGIN = "http://127.0.0.1:8080"  # the default public_url


@pytest.fixture
async def client(sqlite_url: str, clock: FrozenClock) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        require_user_verification=True,
    )
    async with asgi_client(settings, clock) as c:
        yield c


@pytest.fixture
async def home(client: httpx.AsyncClient) -> Home:
    return await Home(await World(client).start()).build()


async def _register(
    home: Home, device: str = "ana-phone", authenticator: SoftAuthenticator | None = None
) -> SoftAuthenticator:
    token = bearer(home.tokens[device])
    r = await home.client.get("/v1/device/passkeys/options", headers=token)
    assert r.status_code == 200, r.text
    options = r.json()
    assert options["rp"]["id"] == RP_ID
    assert options["attestation"] == "none"
    assert options["authenticatorSelection"] == {
        "authenticatorAttachment": "platform",
        "userVerification": "required",
        "residentKey": "preferred",
    }
    authenticator = authenticator or SoftAuthenticator(RP_ID, ORIGIN)
    r = await home.client.post(
        "/v1/device/passkeys",
        json={"credential": authenticator.register(options["challenge"])},
        headers=token,
    )
    assert r.status_code == 201, r.text
    return authenticator


def _text(approval: dict[str, Any], decision: str) -> str:
    sign = approval["sign"]
    return signed_text(
        sign["format"],
        approval["id"],
        decision,
        approval["kind"],
        approval["subject"],
        sign["action_sha256"],
        sign["challenge"],
        sign["expires_at"],
    )


async def _waiting(home: Home) -> tuple[dict[str, Any], dict[str, Any]]:
    call = await home.ask()
    [approval] = [a for a in await home.inbox() if a["binding_code"] == call["binding_code"]]
    return call, approval


async def _decide(
    home: Home,
    approval: dict[str, Any],
    decision: str,
    passkey: dict[str, Any] | None,
    device: str = "ana-phone",
) -> httpx.Response:
    body: dict[str, Any] = {
        "decision": decision,
        "device_id": device,
        "signature": home.sign(approval, decision, device),
    }
    if passkey is not None:
        body["passkey"] = passkey
    return await home.decide(approval["id"], **body)


async def _journal(home: Home) -> list[dict[str, Any]]:
    r = await home.client.get("/v1/audit?limit=1000", headers=bearer(home.world.operator))
    return list(r.json()["entries"])


async def test_a_registered_passkey_approves_with_user_verification_and_the_journal_says_so(
    home: Home,
) -> None:
    authenticator = await _register(home)
    call, approval = await _waiting(home)
    r = await _decide(home, approval, "approved", authenticator.assert_text(_text(approval, "approved")))
    assert r.status_code == 200, r.text
    assert (await home.view(call["id"]))["status"] == "pending"  # approved: on its way to the door
    [decided] = [e for e in await _journal(home) if e["action"] == "approval.decided"]
    assert decided["data"]["verified_by"] == "passkey"
    r = await home.client.get("/v1/device/passkeys", headers=bearer(home.tokens["ana-phone"]))
    assert r.json()["require_user_verification"] is True
    assert [p["credential_id"] for p in r.json()["passkeys"]] == [b64url(authenticator.credential_id)]


async def test_an_rs256_passkey_is_offered_registered_and_approves(home: Home) -> None:
    r = await home.client.get("/v1/device/passkeys/options", headers=bearer(home.tokens["ana-phone"]))
    assert [p["alg"] for p in r.json()["pubKeyCredParams"]] == [-7, -8, -257]
    authenticator = await _register(home, authenticator=SoftAuthenticator.rs256(RP_ID, ORIGIN))
    call, approval = await _waiting(home)
    r = await _decide(home, approval, "approved", authenticator.assert_text(_text(approval, "approved")))
    assert r.status_code == 200, r.text
    assert (await home.view(call["id"]))["status"] == "pending"


async def test_a_deny_is_verified_too(home: Home) -> None:
    authenticator = await _register(home)
    call, approval = await _waiting(home)
    assert (await _decide(home, approval, "denied", None)).status_code == 403
    r = await _decide(home, approval, "denied", authenticator.assert_text(_text(approval, "denied")))
    assert r.status_code == 200, r.text
    assert (await home.view(call["id"]))["status"] == "refused"


REFUSALS = [
    "no assertion",
    "user verification flag off",
    "another text",
    "another decision",
    "another credential",
    "another device's credential",
    "another origin",
    "a count that went back",
]


@pytest.mark.parametrize("case", REFUSALS)
async def test_a_decision_without_a_good_assertion_is_403_and_the_approval_stays_pending(
    home: Home, case: str
) -> None:
    authenticator = await _register(home)
    tablet = await _register(home, "tablet")
    _, first = await _waiting(home)  # one good use moves the counter to 1
    ok = await _decide(home, first, "approved", authenticator.assert_text(_text(first, "approved")))
    assert ok.status_code == 200, ok.text
    call, approval = await _waiting(home)
    text = _text(approval, "approved")
    passkey: dict[str, Any] | None = {
        "no assertion": lambda: None,
        "user verification flag off": lambda: authenticator.assert_text(text, user_verified=False),
        "another text": lambda: authenticator.assert_text(_text(first, "approved")),
        "another decision": lambda: authenticator.assert_text(_text(approval, "denied")),
        "another credential": lambda: SoftAuthenticator(RP_ID, ORIGIN).assert_text(text),
        "another device's credential": lambda: tablet.assert_text(text),
        "another origin": lambda: authenticator.assert_text(text, origin="http://evil.test"),
        "a count that went back": lambda: authenticator.assert_text(text, count=1),
    }[case]()
    r = await _decide(home, approval, "approved", passkey)
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "passkey_refused"
    assert "passkey" in r.json()["error"]["message"]
    assert (await home.view(call["id"]))["status"] == "awaiting_approval"
    assert approval["id"] in [a["id"] for a in await home.inbox()]
    refused = [e for e in await _journal(home) if e["action"] == "approval.refused"]
    assert refused[-1]["subject"] == approval["id"]
    if case == "no assertion":  # the journal says it in words, not the protocol's
        assert "no passkey came with the decision" in refused[-1]["reason"]
    # and a good assertion still decides it
    r = await _decide(home, approval, "approved", authenticator.assert_text(text))
    assert r.status_code == 200, r.text


async def test_a_replayed_assertion_is_refused_even_when_its_first_use_was_refused(home: Home) -> None:
    authenticator = await _register(home)
    _, approval = await _waiting(home)
    assertion = authenticator.assert_text(_text(approval, "approved"))
    body = {"decision": "approved", "device_id": "ana-phone", "signature": home.sign(approval, "denied")}
    first = await home.decide(approval["id"], passkey=assertion, **body)
    assert first.status_code == 403 and first.json()["error"]["code"] == "signature_refused"
    replay = await _decide(home, approval, "approved", assertion)
    assert replay.status_code == 403 and replay.json()["error"]["code"] == "passkey_refused"
    [*_, last] = [e for e in await _journal(home) if e["action"] == "approval.refused"]
    assert "sign count" in last["reason"]


async def test_the_operator_sets_one_users_requirement_over_the_global_setting(
    sqlite_url: str, clock: FrozenClock
) -> None:
    settings = Settings(database_url=sqlite_url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(settings, clock) as client:
        home = await Home(await World(client).start()).build()
        _, approval = await _waiting(home)
        operator = bearer(home.world.operator)
        r = await client.put(
            "/v1/users/ana/user-verification", json={"require_user_verification": True}, headers=operator
        )
        assert r.status_code == 204, r.text
        refused = await _decide(home, approval, "approved", None)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "passkey_refused"
        r = await client.put(
            "/v1/users/ana/user-verification", json={"require_user_verification": None}, headers=operator
        )
        assert r.status_code == 204
        assert (await _decide(home, approval, "approved", None)).status_code == 200
        user = bearer(home.tokens["user"])
        r = await client.put(
            "/v1/users/ana/user-verification", json={"require_user_verification": True}, headers=user
        )
        assert r.status_code == 403


async def test_a_registration_that_does_not_verify_is_refused_with_a_sentence(home: Home) -> None:
    token = bearer(home.tokens["ana-phone"])
    options = (await home.client.get("/v1/device/passkeys/options", headers=token)).json()
    other_device = (
        await home.client.get("/v1/device/passkeys/options", headers=bearer(home.tokens["tablet"]))
    ).json()
    for credential in (
        SoftAuthenticator(RP_ID, ORIGIN).register(other_device["challenge"]),  # another device's ceremony
        SoftAuthenticator("evil.test", ORIGIN).register(options["challenge"]),  # another relying party
        {"id": "x"},
    ):
        r = await home.client.post("/v1/device/passkeys", json={"credential": credential}, headers=token)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"].startswith("The passkey could not be registered")
