"""Tokens have a life (DESIGN §15): listed without secrets, expiring, revoked at once, last use noted
at most once a minute; and the command line lists and revokes them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock, SystemClock
from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.wake.local import LocalWake
from tapgate.config import Settings
from tapgate.domain.accounts import Credential
from tapgate.domain.console import SignInKind
from tapgate.domain.errors import Unauthenticated
from tapgate.domain.principals import Principal, TokenKind
from tapgate.services import console
from tapgate.services.context import Context
from tests.conftest import asgi_client
from tests.live import tapgate
from tests.world import bearer


@pytest.fixture
async def client(sqlite_url: str, clock: FrozenClock) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(Settings(database_url=sqlite_url), clock) as c:
        yield c


async def _tenant(client: httpx.AsyncClient, name: str = "acme") -> str:
    operator = (await client.app.state.gateway.create_tenant(name)).token  # type: ignore[attr-defined]
    for user in ("ana", "bob"):
        r = await client.post("/v1/users", json={"user_id": user}, headers=bearer(operator))
        assert r.status_code == 201
    return str(operator)


async def _mint(client: httpx.AsyncClient, operator: str, user: str = "ana", **body: object) -> dict:
    r = await client.post(f"/v1/users/{user}/tokens", json={"kind": "agent"} | body, headers=bearer(operator))
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_a_users_tokens_are_listed_with_their_life_and_never_their_secret(
    client: httpx.AsyncClient, clock: FrozenClock
) -> None:
    operator = await _tenant(client)
    agent = await _mint(client, operator, agent_id="assistant", expires_in_seconds=3600)
    user = await _mint(client, operator, kind="user")
    r = await client.get("/v1/users/ana/tokens", headers=bearer(user["token"]))
    assert r.status_code == 200, r.text
    listed = {t["token_id"]: t for t in r.json()["tokens"]}
    assert set(listed) == {agent["token_id"], user["token_id"]}
    entry = listed[agent["token_id"]]
    assert entry["kind"] == "agent" and entry["agent_id"] == "assistant" and entry["user_id"] == "ana"
    assert entry["scopes"] == ["events", "notices", "tools"]
    assert entry["created_at"].startswith(clock.now().isoformat()[:19])
    assert entry["expires_at"] == agent["expires_at"] and agent["expires_at"] is not None
    assert listed[user["token_id"]]["expires_at"] is None
    for token in (agent["token"], user["token"]):
        assert token.rsplit("_", 1)[1] not in r.text  # no secret, whole or in part
    bob = await client.get("/v1/users/bob/tokens", headers=bearer(user["token"]))
    assert bob.status_code == 404


async def test_the_operator_lists_the_tenants_operator_tokens_by_kind(client: httpx.AsyncClient) -> None:
    operator = await _tenant(client)
    await _tenant(client, "globex")
    await _mint(client, operator)
    r = await client.get("/v1/tokens?kind=operator", headers=bearer(operator))
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    assert [t["kind"] for t in tokens] == ["operator"]  # not globex's, not ana's agent token
    assert (await client.get("/v1/tokens?kind=robot", headers=bearer(operator))).status_code == 422


async def test_a_revoked_token_is_refused_on_its_next_request_and_no_longer_listed(
    client: httpx.AsyncClient,
) -> None:
    operator = await _tenant(client)
    agent = await _mint(client, operator)
    assert (await client.get("/v1/tools", headers=bearer(agent["token"]))).status_code == 200  # cached now
    r = await client.delete(f"/v1/tokens/{agent['token_id']}", headers=bearer(operator))
    assert r.status_code == 204, r.text
    after = await client.get("/v1/tools", headers=bearer(agent["token"]))
    assert after.status_code == 401 and after.json()["error"]["code"] == "unauthenticated"
    listed = (await client.get("/v1/users/ana/tokens", headers=bearer(operator))).json()["tokens"]
    assert agent["token_id"] not in [t["token_id"] for t in listed]
    again = await client.delete(f"/v1/tokens/{agent['token_id']}", headers=bearer(operator))
    assert again.status_code == 404
    audit = (await client.get("/v1/audit", headers=bearer(operator))).json()["entries"]
    assert any(e["action"] == "token.revoked" and e["subject"] == agent["token_id"] for e in audit)


async def test_a_user_revokes_their_own_user_and_agent_tokens_and_nobody_elses(
    client: httpx.AsyncClient,
) -> None:
    operator = await _tenant(client)
    ana = await _mint(client, operator, kind="user")
    ana_agent = await _mint(client, operator)
    ana_spare = await _mint(client, operator, kind="user")
    bob_agent = await _mint(client, operator, user="bob")
    operators = (await client.get("/v1/tokens?kind=operator", headers=bearer(operator))).json()["tokens"]
    as_ana = bearer(ana["token"])
    assert (await client.delete(f"/v1/tokens/{bob_agent['token_id']}", headers=as_ana)).status_code == 404
    assert (await client.delete(f"/v1/tokens/{operators[0]['token_id']}", headers=as_ana)).status_code == 404
    agent_says = await client.delete(
        f"/v1/tokens/{ana_spare['token_id']}", headers=bearer(ana_agent["token"])
    )
    assert agent_says.status_code == 403
    assert (await client.delete(f"/v1/tokens/{ana_agent['token_id']}", headers=as_ana)).status_code == 204
    assert (await client.delete(f"/v1/tokens/{ana_spare['token_id']}", headers=as_ana)).status_code == 204
    assert (await client.get("/v1/tools", headers=bearer(bob_agent["token"]))).status_code == 200


async def test_the_tenants_last_operator_token_cannot_be_revoked(client: httpx.AsyncClient) -> None:
    operator = await _tenant(client)
    gateway = client.app.state.gateway  # type: ignore[attr-defined]
    first = (await client.get("/v1/tokens?kind=operator", headers=bearer(operator))).json()["tokens"][0]
    r = await client.delete(f"/v1/tokens/{first['token_id']}", headers=bearer(operator))
    assert r.status_code == 409 and "last operator token" in r.json()["error"]["message"]
    second = (await gateway.create_operator_token("acme")).token
    r = await client.delete(f"/v1/tokens/{first['token_id']}", headers=bearer(second))
    assert r.status_code == 204
    assert (await client.get("/v1/audit", headers=bearer(operator))).status_code == 401
    assert (await client.get("/v1/audit", headers=bearer(second))).status_code == 200


async def test_a_token_past_its_expiry_is_refused_even_while_cached(
    client: httpx.AsyncClient, clock: FrozenClock
) -> None:
    operator = await _tenant(client)
    agent = await _mint(client, operator, expires_in_seconds=60)
    assert (await client.get("/v1/tools", headers=bearer(agent["token"]))).status_code == 200
    clock.advance(59)
    assert (await client.get("/v1/tools", headers=bearer(agent["token"]))).status_code == 200
    clock.advance(1)
    r = await client.get("/v1/tools", headers=bearer(agent["token"]))
    assert r.status_code == 401 and "expired" in r.json()["error"]["message"]


@pytest.mark.parametrize("seconds", [0, -5, 10**10, 1.5, "60", True])
async def test_an_expiry_that_is_not_a_whole_positive_number_of_seconds_is_refused_naming_the_field(
    client: httpx.AsyncClient, seconds: object
) -> None:
    operator = await _tenant(client)
    body = {"kind": "agent", "expires_in_seconds": seconds}
    r = await client.post("/v1/users/ana/tokens", json=body, headers=bearer(operator))
    assert r.status_code == 422, r.text
    assert "expires_in_seconds" in r.json()["error"]["message"]


async def test_last_used_is_noted_and_moves_at_most_once_a_minute(
    client: httpx.AsyncClient, clock: FrozenClock
) -> None:
    operator = await _tenant(client)
    agent = await _mint(client, operator)

    async def last_used() -> str | None:
        listed = (await client.get("/v1/users/ana/tokens", headers=bearer(operator))).json()["tokens"]
        return next(t["last_used_at"] for t in listed if t["token_id"] == agent["token_id"])

    assert await last_used() is None
    await client.get("/v1/tools", headers=bearer(agent["token"]))
    first = await last_used()
    assert first is not None
    clock.advance(30)
    await client.get("/v1/tools", headers=bearer(agent["token"]))
    assert await last_used() == first
    clock.advance(31)
    await client.get("/v1/tools", headers=bearer(agent["token"]))
    later = await last_used()
    assert later is not None and later > first


async def test_a_request_does_not_write_last_used_on_its_own_path(
    client: httpx.AsyncClient, clock: FrozenClock
) -> None:
    """Requests only note the time; the write waits for the batch (or a listing), never the request."""
    operator = await _tenant(client)
    agent = await _mint(client, operator)
    gateway = client.app.state.gateway  # type: ignore[attr-defined]
    for _ in range(5):
        await client.get("/v1/tools", headers=bearer(agent["token"]))
    async with gateway.store.unit_of_work("acme") as uow:
        stored = await uow.credentials.get(agent["token_id"])
    assert stored.last_used_at is None  # noted in memory, written by the next batch
    await gateway._usage.flush()
    async with gateway.store.unit_of_work("acme") as uow:
        stored = await uow.credentials.get(agent["token_id"])
    assert stored.last_used_at == clock.now()


async def test_a_device_token_is_revoked_by_removing_its_device(client: httpx.AsyncClient) -> None:
    operator = await _tenant(client)
    gateway = client.app.state.gateway  # type: ignore[attr-defined]
    async with gateway.store.unit_of_work("acme") as uow:
        await uow.credentials.add(
            Credential("acme", "00000000000000dd", TokenKind.DEVICE, "0" * 64, frozenset(), datetime.now(UTC))
        )
    r = await client.delete("/v1/tokens/00000000000000dd", headers=bearer(operator))
    assert r.status_code == 409 and "remove the device" in r.json()["error"]["message"]


def test_the_command_line_lists_and_revokes_tokens(tmp_path: Path) -> None:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    config = str(tmp_path / "tapgate.toml")
    spare = tapgate("token", "create", "--config", config, "--tenant", "default", "--kind", "operator")
    assert spare.returncode == 0, spare.stderr
    listed = tapgate("token", "list", "--config", config, "--tenant", "default")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.strip().splitlines()[1:]]
    assert [row[1] for row in rows] == ["operator", "operator"]
    assert spare.stdout.strip().splitlines()[-1].rsplit("_", 1)[1] not in listed.stdout
    revoked = tapgate("token", "revoke", "--config", config, "--tenant", "default", rows[0][0])
    assert revoked.returncode == 0, revoked.stderr
    last = tapgate("token", "revoke", "--config", config, "--tenant", "default", rows[1][0])
    assert last.returncode == 1 and "last operator token" in last.stderr
    unknown = tapgate("token", "revoke", "--config", config, "--tenant", "default", "0123456789abcdef")
    assert unknown.returncode == 1 and "no token" in unknown.stderr
    again = tapgate("token", "list", "--config", config, "--tenant", "default")
    assert [line.split("\t")[0] for line in again.stdout.strip().splitlines()[1:]] == [rows[1][0]]


async def test_the_command_line_lists_and_ends_a_console_session(tmp_path: Path) -> None:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    config = str(tmp_path / "tapgate.toml")
    assert tapgate("user", "add", "ana", "--config", config).returncode == 0
    store = open_sql_store(f"sqlite:///{tmp_path / 'tapgate.db'}")
    try:
        ctx = Context(store, SystemClock(), LocalWake())
        operator = Principal("default", "test", TokenKind.OPERATOR, frozenset())
        new = await console.finish_sign_in(
            ctx, await console.create_link(ctx, operator, "ana"), SignInKind.LINK, ""
        )
        listed = tapgate("token", "list", "--config", config, "--tenant", "default", "--user", "ana")
        assert listed.returncode == 0, listed.stderr
        [row] = [line.split("\t") for line in listed.stdout.splitlines() if "console_session" in line]
        assert row[0] == new.session.session_id and row[-1] == "operator link"
        ended = tapgate("token", "revoke", "--config", config, "--tenant", "default", row[0])
        assert ended.returncode == 0, ended.stderr
        with pytest.raises(Unauthenticated):
            await console.authenticate(ctx, new.cookie)
        again = tapgate("token", "list", "--config", config, "--tenant", "default")
        assert "console_session" not in again.stdout
    finally:
        await store.close()
