"""POST /v1/notices: a content-free heads-up to each of the person's devices, through the push outbox."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.push import GENERIC_BODIES, GENERIC_TITLE, OutboxStatus
from tests.conftest import asgi_client
from tests.pushfakes import PushFakes
from tests.pushworld import Scene, push_router, push_scene
from tests.world import LAMP, World, bearer

WORDS = {"title": "Flights found", "body": "Three options under 200 EUR for Friday"}


async def _notice(scene: Scene, body: dict[str, Any], token: str | None = None) -> httpx.Response:
    headers = bearer(token) if token else scene.agent
    return await scene.client.post("/v1/notices", json=body, headers=headers)


async def _with_browser(scene: Scene, fakes: PushFakes) -> None:
    browser = fakes.subscribe("ana-browser")
    await scene.enrol("ana-browser", {"kind": "webpush", "token": browser.token})
    await scene.enrol("desk-lamp", None, [LAMP])  # no push target: held for its link


def _received(fakes: PushFakes) -> dict[str, dict[str, Any]]:
    """What each device's push said, by device route: the relay's body and Web Push's plaintext."""
    got = {}
    for seen in fakes.seen:
        got[seen.route] = json.loads(seen.plaintext if seen.route == "webpush" else seen.body)
    return got


async def test_a_notice_is_pushed_in_generic_words_and_held_for_a_device_without_a_push_target(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        await _with_browser(scene, fakes)
        body = {"event": "goal.done", "data": {"goal_id": "g-17", "urgent": True, "steps": 3}, "ui": WORDS}
        r = await _notice(scene, body)
        assert r.status_code == 202, r.text
        assert sorted(r.json()["delivered_to"]) == ["ana-browser", "ana-phone", "desk-lamp"]
        await scene.pushes()

        received = _received(fakes)
        assert set(received) == {"relay", "webpush"}
        for push in received.values():
            assert push["event"] == "goal.done"
            assert push["ui"] == {"title": GENERIC_TITLE, "body": GENERIC_BODIES["goal.done"]}
            notice_id = push["data"].pop("notice_id")
            assert notice_id.startswith("ntc_")
            assert push["data"] == {"goal_id": "g-17", "urgent": True, "steps": 3}
        for seen in fakes.seen:
            for word in WORDS.values():
                assert word.encode() not in seen.everything()
        rows = await scene.rows(notice_id)
        sent = [row for row in rows if row.status is OutboxStatus.SENT]
        assert len(sent) == 2 and all((row.data, row.title, row.body) == ({}, None, None) for row in sent)
        [held] = [row for row in rows if row.status is OutboxStatus.HELD]  # the lamp's, for its next link
        assert held.data == {"goal_id": "g-17", "urgent": True, "steps": 3} and held.title is None


async def test_the_persons_words_travel_only_where_notice_text_is_on(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    settings = device_settings.model_copy(update={"notice_text": True})
    async with push_scene(settings, fakes, push_http, push_clock) as scene:
        await _with_browser(scene, fakes)
        assert (await _notice(scene, {"event": "run.finished", "ui": WORDS})).status_code == 202
        await scene.pushes()
        push_clock.advance(10)
        assert (await _notice(scene, {"event": "run.failed", "ui": {"title": "Backup"}})).status_code == 202
        await scene.pushes()

        sent = [json.loads(s.body)["ui"] for s in fakes.route_seen("relay")]
        assert sent == [WORDS, {"title": "Backup", "body": GENERIC_BODIES["run.failed"]}]
        assert json.loads(fakes.route_seen("webpush")[0].plaintext)["ui"] == WORDS


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"note": "call me back about the flat"}, "data.note"),  # a sentence is text, not an id
        ({"goal_id": "g" * 201}, "data.goal_id"),
        ({"goal": {"id": "g-1"}}, "data.goal"),
        ({"ids": ["a", "b"]}, "data.ids"),
        ({"goal_id": None}, "data.goal_id"),
        ({"device_id": "ana-phone"}, "data.device_id"),  # the envelope's own key
        ({"Goal-Id": "g-1"}, "data"),
        ({f"k{n}": n for n in range(17)}, "data"),
        ({f"k{n}": "x" * 100 for n in range(12)}, "data"),  # too much for a push to carry
        ("g-1", "data"),
    ],
)
async def test_notice_data_carries_only_ids_numbers_and_flags(
    device_settings: Settings,
    fakes: PushFakes,
    push_http: httpx.AsyncClient,
    push_clock: FrozenClock,
    data: object,
    field: str,
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        r = await _notice(scene, {"event": "goal.blocked", "data": data})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"].startswith(field)
        assert not [e for e in await scene.audit() if e["action"] == "notice.queued"]
        await scene.pushes()
        assert fakes.seen == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"event": "goal.celebrated"}, "event"),
        ({"event": "goal.done", "ui": {"title": "Done\u202e"}}, "ui.title"),
        ({"event": "goal.done", "ui": {"body": "x" * 241}}, "ui.body"),
        ({"event": "goal.done", "ui": {"subtitle": "x"}}, "ui"),
        ({"event": "goal.done", "ui": {"body": "key AKIAIOSFODNN7EXAMPLE"}}, "ui.body"),
    ],
)
async def test_a_notice_event_and_words_are_checked_even_where_the_words_are_never_shown(
    device_settings: Settings,
    fakes: PushFakes,
    push_http: httpx.AsyncClient,
    push_clock: FrozenClock,
    body: dict[str, Any],
    field: str,
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        r = await _notice(scene, body)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"].startswith(field)
        assert "AKIA" not in r.text


async def test_one_failing_relay_does_not_stop_the_others(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    relays = {"fcm": f"{fakes.base_url}/relay/500", "mipush": f"{fakes.base_url}/relay/ok"}
    async with push_scene(device_settings, fakes, push_http, push_clock, relays=relays) as scene:
        await _with_browser(scene, fakes)
        await scene.enrol("ana-tablet", {"kind": "mipush", "token": "mi-ana-tablet"})
        r = await _notice(scene, {"event": "memory.proposed", "data": {"memory_id": "m-3"}})
        assert sorted(r.json()["delivered_to"]) == ["ana-browser", "ana-phone", "ana-tablet", "desk-lamp"]
        await scene.pushes()
        for wait in (2, 10):
            push_clock.advance(wait)
            await scene.pushes()

        assert fakes.hits["relay/500"] == 3
        assert fakes.hits["relay"] == 1 and fakes.hits["webpush"] == 1  # each once, at once
        assert json.loads(fakes.route_seen("relay")[0].body)["device"]["id"] == "ana-tablet"
        [failed] = [e for e in await scene.audit() if e["action"] == "push.failed"]
        assert failed["data"]["device_id"] == "ana-phone" and failed["data"]["event"] == "memory.proposed"


async def test_a_notice_is_journalled_without_its_words_or_its_data_values(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    settings = device_settings.model_copy(update={"notice_text": True})
    async with push_scene(settings, fakes, push_http, push_clock) as scene:
        body = {"event": "suggestion.proposed", "data": {"suggestion_id": "sug-zebra-9"}, "ui": WORDS}
        assert (await _notice(scene, body)).status_code == 202
        [entry] = [e for e in await scene.audit() if e["action"] == "notice.queued"]
        assert entry["actor"] == "agent:ana/assistant"
        assert entry["data"] == {
            "event": "suggestion.proposed",
            "user_id": "ana",
            "devices": "ana-phone",
            "data_keys": "suggestion_id",
            "own_words": True,
        }
        journal = json.dumps(entry)
        for text in (*WORDS.values(), "sug-zebra-9"):
            assert text not in journal


async def test_who_may_send_a_notice_and_to_whom(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        world = scene.world
        await world.person("bob")
        body = {"event": "goal.done"}
        no_scope = await world.token("ana", "agent", scopes=["tools", "events"])
        assert (await _notice(scene, body, no_scope)).status_code == 403
        assert (await _notice(scene, body, await world.token("ana", "user"))).status_code == 403
        r = await _notice(scene, body | {"user_id": "bob"})  # an agent notifies its own person only
        assert r.status_code == 404
        r = await _notice(scene, body | {"user_id": "ana"})
        assert r.json() == {"delivered_to": ["ana-phone"]}
        assert (await _notice(scene, body, world.operator)).status_code == 422  # which person?
        r = await _notice(scene, body | {"user_id": "bob"}, world.operator)
        assert r.status_code == 202 and r.json() == {"delivered_to": []}  # bob has no device
        r = await _notice(scene, body | {"user_id": "carol"}, world.operator)
        assert r.status_code == 404


async def test_notices_are_refused_past_the_cap_and_while_the_person_has_paused_the_agent(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    settings = device_settings.model_copy(update={"push_cap": 2})
    async with push_scene(settings, fakes, push_http, push_clock) as scene:
        for _ in range(2):
            assert (await _notice(scene, {"event": "run.finished"})).status_code == 202
            await scene.pushes()
            push_clock.advance(10)
        r = await _notice(scene, {"event": "run.finished"})
        assert r.status_code == 429
        assert r.headers["Retry-After"] == "600"
        assert "2 pushes in the last 10 minutes" in r.json()["error"]["message"]
        assert len(fakes.seen) == 2

    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        sms = {"to": "+15551234567", "body": "hello"}
        asked = await scene.invoke("device__ana_phone__sms_send", sms, origin="untrusted")
        user = await scene.world.token("ana", "user")
        inbox = (await scene.client.get("/v1/inbox", headers=bearer(user))).json()
        r = await scene.client.post(
            f"/v1/approvals/{inbox['approvals'][0]['id']}",
            json={"decision": "denied", "not_me": True},
            headers=bearer(user),
        )
        assert r.status_code == 200, r.text
        r = await _notice(scene, {"event": "goal.blocked"})
        assert r.status_code == 429
        assert "wasn't them" in r.json()["error"]["message"]
        assert int(r.headers["Retry-After"]) == scene.gateway.limits.not_me_cooldown_seconds
        assert asked["status"] == "awaiting_approval"


async def test_with_the_device_flags_off_there_is_no_notice_route_and_no_push_worker(
    settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with asgi_client(settings, push_clock, push_router(push_http, fakes, push_clock)) as client:
        world = await World(client).start()
        await world.person("ana")
        agent = await world.agent("ana")
        r = await client.post("/v1/notices", json={"event": "goal.done"}, headers=bearer(agent))
        assert r.status_code == 404
        gateway = client.app.state.gateway  # type: ignore[attr-defined]
        assert gateway.push_stats is None
        assert "tapgate_push_sent_total" not in (await client.get("/metrics")).text
    assert fakes.seen == []
