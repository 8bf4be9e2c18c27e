"""The console offers a proof to download where one exists: on a call the person's phone approved and on
a signed mandate, never on a call that asked nobody; what it downloads verifies offline."""

from __future__ import annotations

import re

from tapgate.domain.proofs import verify
from tests import independent_verifier
from tests.test_console import LAMP_TOOL, Person, ana, client  # noqa: F401  (the fixtures)
from tests.world import LAMP, bearer, device_body

DOOR = LAMP | {"name": "unlock_door", "description": "Unlock the front door.", "confirm": True}
DOOR_TOOL = "device__front_door__unlock_door"


async def test_the_calls_and_mandates_pages_offer_a_proof_that_verifies_where_one_exists(ana: Person) -> None:  # noqa: F811
    w = ana.world
    await w.enrol("ana", device_body("front-door", [DOOR], grants=["unlock_door"]))
    plain = await ana.call()
    assert plain["status"] == "pending"  # asked nobody: nothing to prove
    r = await ana.client.post(
        "/v1/invocations",
        json={"tool": DOOR_TOOL, "arguments": {"on": True}},
        headers=bearer(ana.tokens["agent"]),
    )
    asked = r.json()
    assert asked["status"] == "awaiting_approval", asked
    inbox = (await ana.client.get("/v1/inbox", headers=bearer(ana.tokens["phone"]))).json()["approvals"]
    [card] = [a for a in inbox if a["kind"] == "unlock_door"]
    body = {"decision": "approved", "signature": ana.sign(card, "approved")}
    assert (
        await ana.client.post(f"/v1/approvals/{card['id']}", json=body, headers=bearer(ana.tokens["phone"]))
    ).status_code == 200
    mandate = {"tools": [LAMP_TOOL], "max_calls": 3, "expires_in_seconds": 3600, "purpose": "evening lights"}
    requested = (
        await ana.client.post("/v1/mandates", json=mandate, headers=bearer(ana.tokens["agent"]))
    ).json()
    inbox = (await ana.client.get("/v1/inbox", headers=bearer(ana.tokens["phone"]))).json()["approvals"]
    [signing] = [a for a in inbox if a["id"] == requested["approval_id"]]
    body = {"decision": "approved", "signature": ana.sign(signing, "approved")}
    assert (
        await ana.client.post(
            f"/v1/approvals/{signing['id']}", json=body, headers=bearer(ana.tokens["phone"])
        )
    ).status_code == 200

    await ana.sign_in_by_link()
    calls = await ana.page("/console/calls")
    links = re.findall(r'href="(/console/calls/[^"]+/proof)" download>Download proof', calls)
    assert links == [f"/console/calls/{asked['id']}/proof"]
    downloaded = await ana.client.get(links[0])
    assert downloaded.status_code == 200
    assert downloaded.headers["content-disposition"] == f'attachment; filename="call-{asked["id"]}.sd-jwt"'
    keys = (await ana.client.get("/.well-known/jwks.json")).json()
    assert verify(downloaded.text, keys).sentence.startswith("ana's device ana-phone approved unlock_door, ")
    independent_verifier.check(downloaded.text, keys)

    mandates = await ana.page("/console/mandates")
    link = f"/console/mandates/{requested['mandate_id']}/proof"
    assert f'href="{link}" download>Download proof' in mandates
    proof = (await ana.client.get(link)).text
    assert f"approved mandate {requested['mandate_id']}" in verify(proof, keys).sentence
    nothing = await ana.client.get(f"/console/calls/{plain['id']}/proof")
    assert nothing.status_code == 409 and "signed nothing to prove" in nothing.text
