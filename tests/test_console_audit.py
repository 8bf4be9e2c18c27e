"""The person's Audit and Calls pages show the person's own entries, chosen by user id, and the Audit page
checks the chain from where it last verified it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.errors import BrokenChain
from tests.conftest import asgi_client
from tests.world import World, bearer, device_body

FORM = "application/x-www-form-urlencoded"
SAME_ORIGIN = {"content-type": FORM, "origin": "http://tapgate.test", "sec-fetch-site": "same-origin"}


@pytest.fixture
async def world(sqlite_url: str, clock: FrozenClock) -> AsyncIterator[World]:
    settings = Settings(database_url=sqlite_url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(settings, clock) as client:
        yield await World(client).start()


async def _sign_in(world: World, user_id: str) -> str:
    """Sign ``user_id`` in to the console on the world's client; the page's CSRF token."""
    gateway = world.client.app.state.gateway  # type: ignore[attr-defined]
    url: str = await gateway.console_link(await gateway.authenticate(world.operator), user_id)
    r = await world.client.post("/" + url.split("://", 1)[1].split("/", 1)[1], headers=SAME_ORIGIN)
    assert r.status_code == 303, r.text
    page = await _page(world, "/console/agents")
    return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]


async def _page(world: World, path: str) -> str:
    r = await world.client.get(path)
    assert r.status_code == 200, r.text
    return r.text


async def _pause(world: World, csrf: str, paused: bool) -> None:
    body = httpx.QueryParams({"paused": "true" if paused else "false", "csrf": csrf})
    r = await world.client.post("/console/agents/pause", content=str(body).encode(), headers=SAME_ORIGIN)
    assert r.status_code == 303, r.text


async def test_an_entry_whose_subject_is_another_users_id_stays_off_that_users_audit_page(
    world: World,
) -> None:
    await world.person("ana")
    await world.person("bob")
    await world.enrol("bob", device_body("ana", []))  # bob's device, named as ana's user id reads
    await _sign_in(world, "ana")
    ana_page = await _page(world, "/console/audit")
    assert "user.created" in ana_page  # about her: it names her as its user
    assert "device.enrolled" not in ana_page
    await _sign_in(world, "bob")
    assert "device.enrolled" in await _page(world, "/console/audit")


async def test_another_persons_refused_calls_stay_off_the_persons_calls_page(world: World) -> None:
    await world.person("ana")
    await world.person("ana-b")
    other = await world.agent("ana-b", "ana")  # an agent named as the other user's id
    r = await world.client.post(
        "/v1/invocations", json={"tool": "device__nothing__here", "arguments": {}}, headers=bearer(other)
    )
    assert r.json()["status"] == "refused", r.text
    await _sign_in(world, "ana")
    assert "device__nothing__here" not in await _page(world, "/console/calls")
    await _sign_in(world, "ana-b")
    assert "device__nothing__here" in await _page(world, "/console/calls")


async def test_the_audit_page_checks_only_entries_after_the_last_it_verified(
    world: World, sqlite_url: str
) -> None:
    await world.person("ana")
    csrf = await _sign_in(world, "ana")
    assert "The journal verifies" in await _page(world, "/console/audit")
    database = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(database) as db:  # an old entry, behind the verified mark, altered
        db.execute("UPDATE audit_entries SET subject = 'nobody' WHERE tenant_id = 'acme' AND seq = 1")
    await _pause(world, csrf, True)
    page = await _page(world, "/console/audit")
    assert "The journal verifies" in page  # the old entry is not read again on every request
    gateway = world.client.app.state.gateway  # type: ignore[attr-defined]
    with pytest.raises(BrokenChain, match="audit entry 1 was altered"):
        await gateway.verify_audit("acme")  # what `tapgate audit verify` runs still reads them all
    await _pause(world, csrf, False)
    with sqlite3.connect(database) as db:  # a new entry, after the mark, altered
        (last,) = db.execute("SELECT max(seq) FROM audit_entries WHERE tenant_id = 'acme'").fetchone()
        db.execute(f"UPDATE audit_entries SET subject = 'nobody' WHERE tenant_id = 'acme' AND seq = {last}")
    page = await _page(world, "/console/audit")
    assert f"The journal does not verify: tenant acme: audit entry {last} was altered" in page
    assert f"audit entry {last} was altered" in await _page(world, "/console/audit")  # and stays so
