"""Pairing races, repeated on SQLite and PostgreSQL (§15): a single-use code is claimed once however many
devices post it at the same moment, and every wrong comparison code counts a try."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.pairing import MAX_COMPARISON_ATTEMPTS
from tests.conftest import asgi_client, tenant_name
from tests.reliability import report, scaled
from tests.world import LAMP, World, bearer, device_body

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@contextlib.asynccontextmanager
async def _world(engine: str, request: pytest.FixtureRequest, clock: FrozenClock) -> AsyncIterator[World]:
    url = (
        request.getfixturevalue("sqlite_url")
        if engine == "sqlite"
        else request.getfixturevalue("postgres").app_url
    )
    config = Settings(database_url=url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(config, clock) as client:
        yield await World(client, tenant=tenant_name()).start()


async def _start(world: World, user_id: str) -> dict[str, str]:
    r = await world.client.post(f"/v1/users/{user_id}/pairings", json={}, headers=bearer(world.operator))
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_pairing_code_claimed_by_many_devices_at_once_lets_exactly_one_in(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    trials, devices = scaled(3, 30), 8
    async with _world(engine, request, clock) as world:
        for trial in range(trials):
            user = f"u{trial}"
            await world.person(user)
            code = (await _start(world, user))["code"]
            replies = await asyncio.gather(
                *(
                    world.client.post("/v1/pair", json={"code": code, **device_body(f"phone-{i}", [LAMP])})
                    for i in range(devices)
                )
            )
            outcomes = Counter(r.status_code for r in replies)
            assert outcomes == {201: 1, 409: devices - 1}, (trial, [r.text for r in replies])
            listed = await world.client.get(f"/v1/users/{user}/devices", headers=bearer(world.operator))
            assert len(listed.json()["devices"]) == 1
    report(f"race pairing claims {engine}", trials=trials, claims_at_once=devices)


@pytest.mark.parametrize("engine", ENGINES)
async def test_wrong_comparison_codes_sent_at_once_each_count_a_try(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    trials, guesses = scaled(3, 30), 20
    async with _world(engine, request, clock) as world:
        for trial in range(trials):
            user = f"u{trial}"
            await world.person(user)
            started = await _start(world, user)
            paired = await world.client.post(
                "/v1/pair", json={"code": started["code"], **device_body("phone", [LAMP])}
            )
            wrong = f"{(int(paired.json()['comparison_code']) + 1) % 10**6:06d}"
            replies = await asyncio.gather(
                *(
                    world.client.post(
                        f"/v1/pairings/{started['pairing_id']}/consent",
                        json={"comparison_code": wrong, "approved": True},
                        headers=bearer(world.operator),
                    )
                    for _ in range(guesses)
                )
            )
            outcomes = Counter(r.status_code for r in replies)
            tries = MAX_COMPARISON_ATTEMPTS
            assert outcomes == {403: tries, 409: guesses - tries}, (trial, [r.text for r in replies])
            shown = await world.client.get(
                f"/v1/pairings/{started['pairing_id']}", headers=bearer(world.operator)
            )
            assert shown.json()["status"] == "declined"
    report(f"race pairing tries {engine}", trials=trials, guesses_at_once=guesses)
