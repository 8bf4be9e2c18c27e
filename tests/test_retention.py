"""Retention (DESIGN §15): message bodies are erased after retention_days; rows, digests and the journal
stay; `tapgate prune` erases them now."""

from __future__ import annotations

from pathlib import Path

import httpx

from tapgate.adapters.clock import FrozenClock
from tapgate.domain.events import INGEST_MESSAGE
from tapgate.domain.push import OutboxItem, OutboxStatus
from tapgate.services import events
from tapgate.services.retention import RetentionSweeper
from tests.live import tapgate
from tests.world import LAMP, World, bearer, device_body

SECRET_WORDS = "meet me behind the old mill"


async def test_bodies_older_than_the_retention_period_are_erased_and_the_rows_stay(
    device_api: httpx.AsyncClient, clock: FrozenClock
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    caps = [{"name": "sms_send"}, LAMP]
    phone = await world.enrol("ana", device_body("ana-phone", caps, grants=["sms_send", "set_light"]))
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]

    async def call(tool: str, arguments: dict[str, object], message: str) -> str:
        r = await device_api.post(
            "/v1/invocations", json={"tool": tool, "arguments": arguments}, headers=bearer(agent)
        )
        invocation_id = str(r.json()["id"])
        r = await device_api.post(
            f"/v1/device/invocations/{invocation_id}/result",
            json={"status": "done", "message": message},
            headers=bearer(phone),
        )
        assert r.status_code == 200, r.text
        return invocation_id

    sms = {
        "channel": "sms",
        "sender": "+15550001111",
        "body": SECRET_WORDS,
        "received_at": "2026-01-01T08:00:00Z",
    }
    assert (await device_api.post("/v1/device/ingest", json=sms, headers=bearer(phone))).status_code == 202
    old_sms = await call(
        "device__ana_phone__sms_send", {"to": "+15550002222", "body": SECRET_WORDS}, "sent ok"
    )
    old_lamp = await call("device__ana_phone__set_light", {"on": True}, "light is on")
    async with gateway.store.unit_of_work(world.tenant) as uow:
        digest_before = (await uow.invocations.get("ana", old_sms)).arguments_sha256
    clock.advance(29 * 86_400)
    recent = await call("device__ana_phone__sms_send", {"to": "+15550002222", "body": "recent words"}, "fine")

    assert await gateway.prune() == (await gateway.prune())  # nothing is old yet: a no-op, twice
    clock.advance(2 * 86_400)  # the first calls are 31 days old, the recent one 2
    pruned = await gateway.prune()
    assert pruned.invocations >= 2 and pruned.events == 1

    async with gateway.store.unit_of_work(world.tenant) as uow:
        sms_row, lamp_row, recent_row = [
            await uow.invocations.get("ana", i) for i in (old_sms, old_lamp, recent)
        ]
    assert sms_row.arguments == {} and sms_row.message is None
    assert sms_row.arguments_sha256 == digest_before and sms_row.status.value == "done"
    assert lamp_row.arguments == {"on": True} and lamp_row.message is None  # a lamp's arguments are no body
    assert recent_row.arguments["body"] == "recent words" and recent_row.message == "fine"
    principal = await gateway.authenticate(agent)
    [message] = [e for e in await events.read(gateway.ctx, principal, 0) if e.type == "ingest.message"]
    assert message.data["body"] == "" and message.data["erased"] is True and message.data["session_id"]
    assert (
        SECRET_WORDS not in (await device_api.get(f"/v1/invocations/{old_sms}", headers=bearer(agent))).text
    )
    assert await gateway.verify_audit(world.tenant)  # the journal is whole


def test_prune_on_the_command_line_erases_now(tmp_path: Path) -> None:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    pruned = tapgate("prune", "--config", str(tmp_path / "tapgate.toml"))
    assert pruned.returncode == 0, pruned.stderr
    assert "older than 30 days" in pruned.stdout and "let go of 0 notices" in pruned.stdout


async def test_an_old_approval_keeps_its_decision_but_not_the_message_it_showed(
    device_api: httpx.AsyncClient, clock: FrozenClock
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    await world.enrol("ana", device_body("ana-phone", [{"name": "sms_send"}], grants=["sms_send"]))
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    r = await device_api.post(
        "/v1/invocations",
        json={
            "tool": "device__ana_phone__sms_send",
            "arguments": {"to": "+15550002222", "body": SECRET_WORDS},
            "origin": "untrusted",  # an untrusted text is signed for first: an approval shows it
        },
        headers=bearer(agent),
    )
    assert r.json()["status"] == "awaiting_approval", r.text
    async with gateway.store.unit_of_work(world.tenant) as uow:
        [approval] = await uow.approvals.pending_for("ana")
    assert SECRET_WORDS in str(approval.preview) and approval.arguments is not None
    clock.advance(31 * 86_400)
    await gateway.prune()
    async with gateway.store.unit_of_work(world.tenant) as uow:
        erased = await uow.approvals.get(approval.approval_id)
    assert erased is not None and erased.arguments is None
    assert SECRET_WORDS not in str(erased.preview) and erased.preview["erased"] is True
    assert erased.sign == approval.sign  # what was signed can still be told apart, not read


async def test_a_notice_held_for_a_device_without_push_is_let_go_after_its_life(
    device_api: httpx.AsyncClient, clock: FrozenClock
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))  # no push target
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]
    body = {"event": "goal.done", "data": {"goal_id": "g-1"}}
    r = await device_api.post("/v1/notices", json=body, headers=bearer(agent))
    assert r.status_code == 202 and r.json() == {"delivered_to": ["desk-lamp"]}, r.text

    audit = (await device_api.get("/v1/audit?limit=1000", headers=bearer(world.operator))).json()["entries"]
    [notice_id] = [e["subject"] for e in audit if e["action"] == "notice.queued"]

    async def row() -> OutboxItem:
        async with gateway.store.unit_of_work(world.tenant) as uow:
            [found] = await uow.outbox.for_subject(notice_id)
        return found

    clock.advance(gateway.limits.notice_life_seconds - 1)
    assert (await gateway.prune()).notices == 0
    assert (await row()).status is OutboxStatus.HELD
    clock.advance(2)
    assert (await gateway.prune()).notices == 1
    let_go = await row()
    assert let_go.status is OutboxStatus.SKIPPED and let_go.data == {}
    assert (await gateway.prune()).notices == 0


async def test_each_round_of_the_sweeper_looks_at_the_events_after_where_the_last_round_ended(
    device_api: httpx.AsyncClient, clock: FrozenClock
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    phone = await world.enrol("ana", device_body("ana-phone", [{"name": "sms_send"}], grants=["sms_send"]))
    gateway = device_api.app.state.gateway  # type: ignore[attr-defined]

    async def forward(body: str) -> int:
        sms = {"channel": "sms", "sender": "+15550001111", "body": body, "received_at": "2026-01-01T08:00Z"}
        r = await device_api.post("/v1/device/ingest", json=sms, headers=bearer(phone))
        assert r.status_code == 202, r.text
        async with gateway.store.unit_of_work(world.tenant) as uow:
            return max(e.seq for e in await uow.events.read("ana", 0, 100))

    sweeper = RetentionSweeper(gateway.ctx)
    first_message = await forward(SECRET_WORDS)
    clock.advance(31 * 86_400)
    assert (await sweeper.sweep()).events == 1  # the first round of a process looks at every event
    assert sweeper.events_through[world.tenant] >= first_message
    second_message = await forward("later words")
    assert (await sweeper.sweep()).events == 0  # not old yet: the round ends before it
    assert sweeper.events_through[world.tenant] < second_message
    clock.advance(31 * 86_400)
    assert (await sweeper.sweep()).events == 1
    assert sweeper.events_through[world.tenant] >= second_message
    async with gateway.store.unit_of_work(world.tenant) as uow:
        messages = [e for e in await uow.events.read("ana", 0, 100) if e.type == INGEST_MESSAGE]
    assert [(e.data["body"], e.data["erased"]) for e in messages] == [("", True), ("", True)]
