"""The HTTP API end to end on PostgreSQL: operators, users and tokens, and tenants that never meet."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tapgate.bootstrap import build_app
from tapgate.config import Settings
from tapgate.gateway import Gateway
from tests.conftest import PostgresDatabase, tenant_name

pytestmark = pytest.mark.postgres


@pytest.fixture
async def api(postgres: PostgresDatabase) -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP API in process (ASGI), over the session's PostgreSQL as the app's own role."""
    app = build_app(Settings(database_url=postgres.app_url))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://tapgate.test") as client,
    ):
        client.app = app  # type: ignore[attr-defined]
        yield client


async def _operator(api: httpx.AsyncClient) -> tuple[str, dict[str, str]]:
    """A fresh tenant and its operator's headers."""
    gateway: Gateway = api.app.state.gateway  # type: ignore[attr-defined]
    tenant = tenant_name()
    operator = await gateway.create_tenant(tenant)
    return tenant, {"Authorization": f"Bearer {operator.token}"}


async def _audit(api: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    response = await api.get("/v1/audit", headers=headers, params={"limit": 1000})
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = response.json()["entries"]
    return entries


async def test_an_operator_creates_a_user_and_its_tokens_over_the_api_on_postgresql(
    api: httpx.AsyncClient,
) -> None:
    tenant, operator = await _operator(api)
    assert (await api.get("/readyz")).json() == {"status": "ready"}

    created = await api.post("/v1/users", headers=operator, json={"user_id": "ann", "display_name": "Ann"})
    again = await api.post("/v1/users", headers=operator, json={"user_id": "ann"})
    user_token = await api.post("/v1/users/ann/tokens", headers=operator, json={"kind": "user"})
    agent_token = await api.post(
        "/v1/users/ann/tokens", headers=operator, json={"kind": "agent", "scopes": ["tools"]}
    )

    assert (created.status_code, created.json()) == (201, {"user_id": "ann", "display_name": "Ann"})
    assert again.status_code == 409
    assert user_token.status_code == 201
    assert user_token.json()["token"].startswith(f"tgu_{tenant}_")
    assert user_token.json()["scopes"] == ["approve", "device.read", "device.write"]
    assert agent_token.status_code == 201
    assert agent_token.json()["scopes"] == ["tools"]
    # The new tokens authenticate (403, not 401): they are real, they just are not operators.
    for token in (user_token.json()["token"], agent_token.json()["token"]):
        denied = await api.get("/v1/audit", headers={"Authorization": f"Bearer {token}"})
        assert denied.status_code == 403
    entries = await _audit(api, operator)
    assert [e["action"] for e in entries] == [
        "tenant.created",
        "token.created",
        "user.created",
        "token.created",
        "token.created",
    ]
    assert [e["seq"] for e in entries] == [1, 2, 3, 4, 5]
    assert all(e["prev_hash"] == p["hash"] for p, e in itertools.pairwise(entries))
    gateway: Gateway = api.app.state.gateway  # type: ignore[attr-defined]
    assert await gateway.verify_audit(tenant) == {tenant: 5}


async def test_operators_of_two_tenants_see_neither_the_others_users_nor_its_audit_journal(
    api: httpx.AsyncClient,
) -> None:
    a, a_operator = await _operator(api)
    b, b_operator = await _operator(api)
    assert (await api.post("/v1/users", headers=b_operator, json={"user_id": "bob"})).status_code == 201
    b_token = await api.post("/v1/users/bob/tokens", headers=b_operator, json={"kind": "agent"})
    assert b_token.status_code == 201
    b_before = await _audit(api, b_operator)

    reach = await api.post("/v1/users/bob/tokens", headers=a_operator, json={"kind": "agent"})
    # The same user id in two tenants is two people: A's "ann" does not collide with B's.
    a_ann = await api.post("/v1/users", headers=a_operator, json={"user_id": "ann"})
    b_ann = await api.post("/v1/users", headers=b_operator, json={"user_id": "ann"})
    own = await api.post("/v1/users/ann/tokens", headers=a_operator, json={"kind": "agent"})

    assert (reach.status_code, reach.json()["error"]["code"]) == (404, "not_found")
    assert (a_ann.status_code, b_ann.status_code, own.status_code) == (201, 201, 201)
    a_entries = await _audit(api, a_operator)
    b_entries = await _audit(api, b_operator)
    assert [e["subject"] for e in a_entries if e["action"] == "tenant.created"] == [a]
    assert [e["subject"] for e in b_entries if e["action"] == "tenant.created"] == [b]
    assert [e["subject"] for e in a_entries if e["action"] == "user.created"] == ["ann"]
    assert [e["subject"] for e in b_entries if e["action"] == "user.created"] == ["bob", "ann"]
    assert not {e["hash"] for e in a_entries} & {e["hash"] for e in b_entries}
    assert all(b not in e["subject"] and "bob" not in str(e["data"]) for e in a_entries)
    # A's failed reach left no trace in B's journal: B has only its own user "ann" on top.
    assert b_entries[: len(b_before)] == b_before
    assert [e["action"] for e in b_entries[len(b_before) :]] == ["user.created"]


async def test_an_operator_token_rewritten_to_name_another_tenant_is_refused(
    api: httpx.AsyncClient,
) -> None:
    a, a_operator = await _operator(api)
    b, _ = await _operator(api)
    forged = a_operator["Authorization"].replace(f"tgo_{a}_", f"tgo_{b}_")
    assert forged != a_operator["Authorization"]

    response = await api.get("/v1/audit", headers={"Authorization": forged})

    assert response.status_code == 401
    assert (await api.get("/v1/audit", headers=a_operator)).status_code == 200
