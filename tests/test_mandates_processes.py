"""Standing mandates across real gateway processes: two `tapgate serve` on one PostgreSQL never spend one
use twice, and a mandate revoked on one gateway covers no call on the other the moment the revoke
commits; and on SQLite in one process, concurrent calls spend exactly the uses there are."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tapgate.adapters.store.migrate import migrate
from tapgate.cli import app
from tapgate.domain.approvals import sign_decision, signed_text
from tests.conftest import PostgresDatabase
from tests.live import Server, new_tenant, write_config
from tests.world import LAMP, bearer, device_body, new_key

LAMP_TOOL = "device__desk_lamp__set_light"
CONFIRMED_LAMP = LAMP | {"confirm": True}


@pytest.fixture
def two_gateways(postgres: PostgresDatabase, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    config = write_config(tmp_path, postgres.app_url, max_open_confirmations=100)
    a, b = Server(config).start(), Server(config)
    try:
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


async def _home(client: httpx.AsyncClient, operator: str, max_calls: int) -> dict[str, str]:
    """ana, her user and agent tokens, a lamp that asks before each call, her phone (an approver), and a
    mandate for the lamp the phone signed."""
    as_operator = bearer(operator)
    await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)
    tokens = {}
    for kind in ("user", "agent"):
        r = await client.post("/v1/users/ana/tokens", json={"kind": kind}, headers=as_operator)
        tokens[kind] = r.json()["token"]
    lamp = device_body("desk-lamp", [CONFIRMED_LAMP], grants=["set_light"])
    await client.post("/v1/users/ana/devices", json=lamp, headers=as_operator)
    key = new_key()
    phone = device_body("ana-phone", [], key, grants=["approvals"])
    r = await client.post("/v1/users/ana/devices", json=phone, headers=as_operator)
    tokens["phone"] = r.json()["device_token"]
    body = {"tools": [LAMP_TOOL], "max_calls": max_calls, "expires_in_seconds": 3600, "purpose": "lights"}
    asked = (await client.post("/v1/mandates", json=body, headers=bearer(tokens["agent"]))).json()
    inbox = (await client.get("/v1/inbox", headers=bearer(tokens["phone"]))).json()["approvals"]
    card: dict[str, Any] = next(a for a in inbox if a["id"] == asked["approval_id"])
    sign = card["sign"]
    text = signed_text(
        sign["format"], card["id"], "approved", card["kind"], card["subject"],
        sign["action_sha256"], sign["challenge"], sign["expires_at"],
    )  # fmt: skip
    decision = {"decision": "approved", "signature": sign_decision(key.private, text)}
    r = await client.post(f"/v1/approvals/{card['id']}", json=decision, headers=bearer(tokens["phone"]))
    assert r.status_code == 200, r.text
    tokens["mandate"] = asked["mandate_id"]
    return tokens


async def _call(client: httpx.AsyncClient, agent: str) -> dict[str, Any]:
    call = {"tool": LAMP_TOOL, "arguments": {"on": True}}
    r = await client.post("/v1/invocations", json=call, headers=bearer(agent))
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.postgres
async def test_two_gateways_racing_for_a_mandates_uses_never_spend_one_twice(
    two_gateways: tuple[Server, Server], postgres: PostgresDatabase
) -> None:
    a, b = two_gateways
    operator = await new_tenant(postgres.app_url)
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.url, timeout=30) as on_b,
    ):
        tokens = await _home(on_a, operator, max_calls=5)
        calls = await asyncio.gather(*(_call(c, tokens["agent"]) for c in [on_a, on_b] * 8))
        covered = [c for c in calls if c["mandate_id"] == tokens["mandate"]]
        assert len(covered) == 5
        assert all(c["status"] == "awaiting_approval" for c in calls if c["mandate_id"] is None)
        view = (await on_b.get(f"/v1/mandates/{tokens['mandate']}", headers=bearer(tokens["user"]))).json()
        assert (view["used"], view["status"]) == (5, "exhausted")


@pytest.mark.postgres
async def test_a_mandate_revoked_on_one_gateway_covers_no_call_on_the_other(
    two_gateways: tuple[Server, Server], postgres: PostgresDatabase
) -> None:
    a, b = two_gateways
    operator = await new_tenant(postgres.app_url)
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.url, timeout=30) as on_b,
    ):
        tokens = await _home(on_a, operator, max_calls=100)
        assert (await _call(on_b, tokens["agent"]))["mandate_id"] == tokens["mandate"]
        r = await on_a.delete(f"/v1/mandates/{tokens['mandate']}", headers=bearer(tokens["user"]))
        assert r.status_code == 204
        after = await _call(on_b, tokens["agent"])
        assert after["status"] == "awaiting_approval" and after["mandate_id"] is None


async def test_concurrent_calls_on_sqlite_spend_exactly_the_uses_a_mandate_has(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tapgate.db'}"
    await migrate(url)
    server = Server(write_config(tmp_path, url, max_open_confirmations=100)).start()
    try:
        operator = await new_tenant(url)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            tokens = await _home(client, operator, max_calls=4)
            calls = await asyncio.gather(*(_call(client, tokens["agent"]) for _ in range(12)))
            assert sum(c["mandate_id"] == tokens["mandate"] for c in calls) == 4
            view = await client.get(f"/v1/mandates/{tokens['mandate']}", headers=bearer(tokens["user"]))
            assert view.json()["used"] == 4
    finally:
        server.stop()


async def test_the_operator_lists_shows_and_revokes_a_mandate_from_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tapgate.db'}"
    await migrate(url)
    config = write_config(tmp_path, url)
    server = Server(config).start()
    try:
        tenant = f"t-{secrets.token_hex(3)}"
        operator = await new_tenant(url, tenant)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            tokens = await _home(client, operator, max_calls=7)
            await _call(client, tokens["agent"])

            def cli(*args: str) -> str:
                result = CliRunner().invoke(app, [*args, "--tenant", tenant, "--config", str(config)])
                assert result.exit_code == 0, result.output
                return result.output

            listed = await asyncio.to_thread(cli, "mandate", "list", "--user", "ana")
            assert tokens["mandate"] in listed and "active" in listed and "used 1/7" in listed
            shown = await asyncio.to_thread(cli, "mandate", "show", tokens["mandate"])
            assert "purpose: lights" in shown
            revoked = await asyncio.to_thread(cli, "mandate", "revoke", tokens["mandate"])
            assert f"Revoked {tokens['mandate']}." in revoked
            assert (await _call(client, tokens["agent"]))["mandate_id"] is None
            assert "revoked" in await asyncio.to_thread(cli, "mandate", "list", "--user", "ana")
    finally:
        server.stop()
