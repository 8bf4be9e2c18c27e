"""Races, repeated: each family runs many trials on SQLite and PostgreSQL (a few under `make test`, the
full counts under `make reliability`), and every trial must end in exactly one outcome."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.approvals import sign_decision, signed_text
from tests.conftest import asgi_client, tenant_name
from tests.reliability import report, scaled
from tests.world import LAMP, World, bearer, device_body, new_key

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
DOOR = LAMP | {"name": "unlock_door", "description": "Unlock the front door.", "confirm": True}
LAMP_TOOL = "device__desk_lamp__set_light"


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


async def _journal(world: World) -> list[dict[str, Any]]:
    r = await world.client.get("/v1/audit?limit=1000", headers=bearer(world.operator))
    entries = list(r.json()["entries"])
    while len(r.json()["entries"]) == 1000:
        r = await world.client.get(
            f"/v1/audit?limit=1000&after={entries[-1]['seq']}", headers=bearer(world.operator)
        )
        entries += r.json()["entries"]
    return entries


def _ingest(world: World, token: str, body: str) -> Any:
    return world.client.post(
        "/v1/device/ingest",
        json={
            "channel": "sms",
            "sender": "+15550001111",
            "body": body,
            "received_at": "2026-01-01T08:00:00Z",
        },
        headers=bearer(token),
    )


@pytest.mark.parametrize("engine", ENGINES)
async def test_the_first_two_messages_of_a_device_make_exactly_one_triage_session(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    trials = scaled(6, 100)
    async with _world(engine, request, clock) as world:
        for trial in range(trials):
            user = f"u{trial}"
            await world.person(user)
            phone = await world.enrol(user, device_body("phone", [{"name": "sms_send"}], grants=["sms_send"]))
            replies = await asyncio.gather(*(_ingest(world, phone, f"first {i}") for i in range(3)))
            assert [r.status_code for r in replies] == [202] * 3, [r.text for r in replies]
            sessions = {r.json()["session_id"] for r in replies}
            assert len(sessions) == 1, (trial, sessions)
            assert not any(r.json()["duplicate"] for r in replies)
    report(f"race first triage messages {engine}", trials=trials, messages_at_once=3)


@pytest.mark.parametrize("engine", ENGINES)
async def test_the_ingest_cap_is_exact_under_concurrency_in_every_trial(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    trials = scaled(4, 60)
    async with _world(engine, request, clock, ingest_daily_cap=5) as world:
        for trial in range(trials):
            user = f"u{trial}"
            await world.person(user)
            phone = await world.enrol(user, device_body("phone", [{"name": "sms_send"}], grants=["sms_send"]))
            replies = await asyncio.gather(*(_ingest(world, phone, f"m{i}") for i in range(12)))
            assert sorted(r.status_code for r in replies) == [202] * 5 + [429] * 7, trial
        received = [e for e in await _journal(world) if e["action"] == "ingest.received"]
        assert len(received) == 5 * trials
    report(f"race ingest cap {engine}", trials=trials, messages_at_once=12, cap=5)


async def _lamp(world: World) -> tuple[dict[str, str], dict[str, str]]:
    await world.person("ana")
    agent = bearer(await world.agent("ana"))
    lamp = bearer(await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"])))
    return agent, lamp


async def _invoke(world: World, agent: dict[str, str], tool: str = LAMP_TOOL) -> str:
    r = await world.client.post(
        "/v1/invocations", json={"tool": tool, "arguments": {"on": True}}, headers=agent
    )
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_answer_racing_the_sweep_ends_in_exactly_one_state_every_time(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    trials = scaled(10, 200)
    async with _world(engine, request, clock, invocation_timeout_seconds=10) as world:
        agent, lamp = await _lamp(world)
        gateway = world.client.app.state.gateway  # type: ignore[attr-defined]
        ends: dict[str, str] = {}
        for _ in range(trials):
            call = await _invoke(world, agent)
            clock.advance(10)  # due now: the answer and the sweep race for it
            answer, _ = await asyncio.gather(
                world.client.post(
                    f"/v1/device/invocations/{call}/result", json={"status": "done"}, headers=lamp
                ),
                gateway.sweep(),
            )
            view = (await world.client.get(f"/v1/invocations/{call}", headers=agent)).json()
            assert (answer.status_code, view["status"]) in ((200, "done"), (410, "expired")), answer.text
            ends[call] = view["status"]
        resolutions = [
            e for e in await _journal(world) if e["action"] in ("invocation.answered", "invocation.expired")
        ]
        assert sorted(e["subject"] for e in resolutions) == sorted(ends)
    report(f"race answer vs sweep {engine}", trials=trials)


@pytest.mark.parametrize("engine", ENGINES)
async def test_approve_and_deny_at_once_record_exactly_one_decision_every_time(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    trials = scaled(5, 100)
    async with _world(engine, request, clock, max_open_confirmations=1000) as world:
        await world.person("ana")
        agent = bearer(await world.agent("ana"))
        await world.enrol("ana", device_body("front-door", [DOOR], grants=["unlock_door"]))
        key = new_key("ed25519")
        phone = bearer(await world.enrol("ana", device_body("ana-phone", [], key)))
        for _ in range(trials):
            call = await _invoke(world, agent, "device__front_door__unlock_door")
            [approval] = (await world.client.get("/v1/inbox", headers=phone)).json()["approvals"]
            sign = approval["sign"]

            def decide(
                decision: str, approval: dict[str, Any] = approval, sign: dict[str, Any] = sign
            ) -> Any:
                text = signed_text(
                    sign["format"], approval["id"], decision, approval["kind"], approval["subject"],
                    sign["action_sha256"], sign["challenge"], sign["expires_at"],
                )  # fmt: skip
                body = {"decision": decision, "signature": sign_decision(key.private, text)}
                return world.client.post(f"/v1/approvals/{approval['id']}", json=body, headers=phone)

            yes, no = await asyncio.gather(decide("approved"), decide("denied"))
            assert sorted((yes.status_code, no.status_code)) == [200, 409], (yes.text, no.text)
            view = (await world.client.get(f"/v1/invocations/{call}", headers=agent)).json()
            assert view["status"] == ("pending" if yes.status_code == 200 else "refused")
        decided = [e for e in await _journal(world) if e["action"] == "approval.decided"]
        assert len(decided) == trials
    report(f"race approve vs deny {engine}", trials=trials)


@pytest.mark.parametrize("engine", ENGINES)
async def test_replays_of_one_invocation_id_at_once_make_one_row_every_time(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    trials = scaled(3, 100)
    async with _world(engine, request, clock) as world:
        agent, lamp = await _lamp(world)
        for trial in range(trials):
            body = {"tool": LAMP_TOOL, "arguments": {"on": True}, "invocation_id": f"replay-{trial}"}
            replies = await asyncio.gather(
                *(world.client.post("/v1/invocations", json=body, headers=agent) for _ in range(8))
            )
            assert {r.status_code for r in replies} == {200}
            assert {r.json()["id"] for r in replies} == {f"replay-{trial}"}
        created = [e for e in await _journal(world) if e["action"] == "invocation.created"]
        assert len(created) == trials
        fetched = (await world.client.get("/v1/device/invocations", headers=lamp)).json()["invocations"]
        assert len(fetched) == min(trials, 50)
    report(f"race invocation replays {engine}", trials=trials, replays_at_once=8)


@pytest.mark.parametrize("engine", ENGINES)
async def test_two_answers_at_once_record_exactly_one_every_time(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    """test_check_chain races two answers thirty times; this runs the full count under `make reliability`."""
    trials = scaled(5, 300)
    async with _world(engine, request, clock) as world:
        agent, lamp = await _lamp(world)
        for _ in range(trials):
            call = await _invoke(world, agent)
            replies = await asyncio.gather(
                *(
                    world.client.post(
                        f"/v1/device/invocations/{call}/result", json={"status": s}, headers=lamp
                    )
                    for s in ("done", "failed", "declined")
                )
            )
            assert sorted(r.status_code for r in replies) == [200, 409, 409]
        answered = [e for e in await _journal(world) if e["action"] == "invocation.answered"]
        assert len(answered) == trials
    report(f"race answers {engine}", trials=trials, answers_at_once=3)
