"""Proofs over the HTTP API, on SQLite and PostgreSQL: a signed approval, a mandate and a call under it
export as SD-JWTs that verify offline against the published JWKS (with tapgate's checks and with a
verifier that imports nothing of tapgate); only the person, the agent whose it was and the operator get
one; a rotated key keeps old proofs checkable."""

from __future__ import annotations

from typing import Any

import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.domain.errors import ProofRefused
from tapgate.domain.proofs import verify
from tests import independent_verifier
from tests.test_mandates import DAD, ENGINES, LAMP_TOOL, SMS_TOOL, Home, _home
from tests.world import bearer

BODY = "Running late, home at 7"
UNDECIDED = "This approval is not decided yet: its proof exists once the person's device decides it."


async def _jwks(home: Home) -> dict[str, Any]:
    r = await home.world.client.get("/.well-known/jwks.json")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/jwk-set+json")
    return dict(r.json())


async def _texted(home: Home, decision: str = "approved") -> tuple[dict[str, Any], dict[str, Any]]:
    """The agent texts Dad; ana's phone signs ``decision``. Returns the call and its card."""
    call = await home.call(SMS_TOOL, to=DAD, body=BODY)
    assert call["status"] == "awaiting_approval", call
    r = await home.world.client.get("/v1/inbox", headers=bearer(home.tokens["ana-phone"]))
    card = next(a for a in r.json()["approvals"] if a["kind"] == "sms_send")
    assert (await home.sign(card, decision)).status_code == 200
    return call, card


async def _proof(home: Home, path: str, token: str = "user", **params: str) -> Any:
    return await home.world.client.get(path, params=params, headers=bearer(home.tokens[token]))


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_signed_approval_exports_a_proof_that_verifies_offline_and_says_what_was_approved(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        _, card = await _texted(home)
        r = await _proof(home, f"/v1/approvals/{card['id']}/proof")
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/dc+sd-jwt")
        keys = await _jwks(home)
        proven = verify(r.text, keys)
        assert proven.sentence.startswith("ana's device ana-phone approved sms_send to +44…, ")
        assert proven.sentence.endswith("all 2 arguments disclosed")
        assert proven.arguments == {"to": DAD, "body": BODY}
        assert proven.claims["iss"] == home.gateway.public_url
        checked = independent_verifier.check(r.text, keys)
        assert checked["arguments"] == {"to": DAD, "body": BODY} and checked["sub"] == "ana"
        entries = (await home.world.client.get("/v1/audit", headers=bearer(home.world.operator))).json()
        decided = [e for e in entries["entries"] if e["action"] == "approval.decided"]
        assert checked["journal"] == {"seq": decided[-1]["seq"], "hash": decided[-1]["hash"]}


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_proof_without_disclosures_carries_no_argument_value_and_still_verifies(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        call, _ = await _texted(home, "denied")
        r = await _proof(home, f"/v1/invocations/{call['id']}/proof", token="agent", disclose="none")
        assert r.status_code == 200, r.text
        assert BODY not in r.text and DAD not in r.text
        proven = verify(r.text, await _jwks(home))
        assert "denied sms_send" in proven.sentence and proven.hidden == 2
        assert independent_verifier.check(r.text, await _jwks(home))["hidden"] == 2
        bad = await _proof(home, f"/v1/invocations/{call['id']}/proof", token="agent", disclose="some")
        assert bad.status_code == 422 and "disclose" in bad.json()["error"]["message"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_only_the_person_the_agent_whose_call_it_was_and_the_operator_get_a_proof(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        call, card = await _texted(home)
        path = f"/v1/approvals/{card['id']}/proof"
        for token in ("user", "agent"):
            assert (await _proof(home, path, token)).status_code == 200
        operator = await home.world.client.get(path, headers=bearer(home.world.operator))
        assert operator.status_code == 200
        for token in ("other-agent", "bob"):
            r = await _proof(home, path, token)
            assert r.status_code == 404, (token, r.text)
            assert r.json()["error"]["message"] == f"There is no approval {card['id']!r}."
        assert (await _proof(home, path, "ana-phone")).status_code == 403  # a device's token fetches none
        call_path = f"/v1/invocations/{call['id']}/proof"
        assert (await _proof(home, call_path, "other-agent")).status_code == 404
        r = await home.world.client.get(call_path, headers=bearer(home.world.operator))
        assert r.status_code == 422 and "user_id" in r.json()["error"]["message"]
        r = await home.world.client.get(
            call_path, params={"user_id": "ana"}, headers=bearer(home.world.operator)
        )
        assert r.status_code == 200


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_undecided_or_unsigned_approval_has_no_proof_and_says_why(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        call = await home.call(SMS_TOOL, to=DAD, body=BODY)
        r = await home.world.client.get("/v1/inbox", headers=bearer(home.tokens["ana-phone"]))
        card = next(a for a in r.json()["approvals"] if a["kind"] == "sms_send")
        r = await _proof(home, f"/v1/approvals/{card['id']}/proof")
        assert r.status_code == 409
        assert r.json()["error"] == {"code": "conflict", "message": UNDECIDED}
        decided = await home.world.client.post(
            f"/v1/approvals/{card['id']}", json={"decision": "approved"}, headers=bearer(home.world.operator)
        )
        assert decided.status_code == 200
        r = await _proof(home, f"/v1/invocations/{call['id']}/proof")
        assert r.status_code == 409 and "without a device's signature" in r.json()["error"]["message"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_mandate_and_a_call_under_it_export_proofs_that_verify_offline(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        mandate_id = await home.live()
        covered = await home.call(on=True, brightness=40)
        assert covered["mandate_id"] == mandate_id
        before = {k["kid"] for k in (await _jwks(home))["keys"]}  # other tenants' keys on this database
        mandate = await _proof(home, f"/v1/mandates/{mandate_id}/proof", token="agent")
        assert mandate.status_code == 200, mandate.text
        keys = await _jwks(home)
        assert len({k["kid"] for k in keys["keys"]} - before) == 1  # made with the tenant's first proof
        assert (
            f"approved mandate {mandate_id} for {LAMP_TOOL} (at most 3 calls)"
            in verify(mandate.text, keys).sentence
        )
        assert independent_verifier.check(mandate.text, keys)["arguments"]["mandate_id"] == mandate_id
        r = await _proof(home, f"/v1/invocations/{covered['id']}/proof")
        assert r.status_code == 200, r.text
        proven = verify(r.text, keys)
        assert proven.vct == "tapgate-call-v1"
        assert proven.sentence.startswith(f"assistant called {LAMP_TOOL} on desk-lamp, ")
        assert f"under mandate {mandate_id}, which ana's device ana-phone approved" in proven.sentence
        assert proven.arguments == {"on": True, "brightness": 40}
        assert independent_verifier.check(r.text, keys)["call"]["id"] == covered["id"]
        allowed = await home.call(SMS_TOOL, to=DAD, body=BODY, shadow=True)
        r = await _proof(home, f"/v1/invocations/{allowed['id']}/proof")
        assert r.status_code in (404, 409)


@pytest.mark.parametrize("engine", ENGINES)
async def test_after_a_rotation_new_proofs_use_the_new_key_and_old_proofs_still_verify(
    engine: str, request: pytest.FixtureRequest
) -> None:
    async with _home(engine, request) as home:
        _, card = await _texted(home)
        path = f"/v1/approvals/{card['id']}/proof"
        old = (await _proof(home, path)).text
        old_keys = await _jwks(home)
        kid = await home.gateway.rotate_issuer_key(home.world.tenant)
        new = (await _proof(home, path)).text
        keys = await _jwks(home)
        assert {k["kid"] for k in keys["keys"]} == {kid, *(k["kid"] for k in old_keys["keys"])}
        assert verify(old, keys).sentence == verify(new, keys).sentence
        with pytest.raises(ProofRefused, match="has no key"):
            verify(new, old_keys)
        assert all("d" not in k for k in keys["keys"])


async def test_a_call_whose_text_retention_erased_has_no_proof_and_says_why(
    request: pytest.FixtureRequest,
) -> None:
    clock = FrozenClock()
    async with _home("sqlite", request, clock) as home:
        _, card = await _texted(home)
        assert (await _proof(home, f"/v1/approvals/{card['id']}/proof")).status_code == 200
        clock.advance(31 * 86400)
        await home.gateway.prune()
        r = await _proof(home, f"/v1/approvals/{card['id']}/proof")
        assert r.status_code == 410
        assert r.json()["error"]["message"] == (
            "This call's arguments were erased after the retention period, so its proof cannot be made."
        )
