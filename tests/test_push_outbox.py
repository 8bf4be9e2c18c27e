"""The push outbox worker over the HTTP API in process, with the senders pointed at loopback fakes.

The clock is frozen (near real time, for the relay's timestamp check) and the test moves it; the
worker also runs on its own, and ``send_pushes`` waits until everything due is sent and recorded.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.config import Settings
from tapgate.domain.push import GENERIC_BODIES, GENERIC_TITLE, OutboxStatus
from tapgate.logs import JsonFormatter
from tapgate.services.outbox import PushStats, claim
from tests.conftest import SENDER_TIMEOUT, SHORT_TIMEOUT, asgi_client
from tests.pushfakes import PushFakes
from tests.pushworld import arrived, push_router, push_scene
from tests.world import bearer

CANARY = "okapi-canary-4417"
RETRIES = (2.0, 10.0)  # push_retry_seconds by default


def _relay_messages(fakes: PushFakes) -> list[dict[str, Any]]:
    return [json.loads(seen.body) for seen in fakes.route_seen("relay")]


# -- a push per call, and live first -------------------------------------------------------------------------


async def test_a_call_for_a_sleeping_device_is_pushed_once_with_its_ids_and_generic_words(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        call = await scene.light()
        await scene.pushes()
        await scene.pushes()  # nothing is sent twice

        [message] = _relay_messages(fakes)
        assert message["event"] == "invocation.pending"
        assert message["device"] == {"id": "ana-phone", "user_id": "ana", "push": message["device"]["push"]}
        assert message["data"] == {"invocation_id": call["id"]}
        assert message["ui"] == {"title": GENERIC_TITLE, "body": GENERIC_BODIES["invocation.pending"]}
        [row] = await scene.rows(call["id"])
        assert (row.status, row.attempts, row.delivery_id) == (OutboxStatus.SENT, 1, message["delivery_id"])
        assert await scene.metric("tapgate_push_sent_total") == 1
        assert await scene.metric("tapgate_push_failed_total") == 0


async def test_a_queued_push_goes_out_when_its_row_commits_not_on_the_sweep(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient
) -> None:
    settings = device_settings.model_copy(update={"push_sweep_seconds": 60})
    async with push_scene(settings, fakes, push_http) as scene:  # the real clock; the worker alone sends
        started = time.monotonic()
        await scene.light()
        await arrived(fakes, "relay", seconds=30)
        assert time.monotonic() - started < 30  # the commit woke the worker; its sweep is a minute away


@pytest.mark.parametrize("taken", ["fetched", "answered"])
async def test_a_call_the_live_device_took_within_its_second_is_never_pushed(
    device_settings: Settings,
    fakes: PushFakes,
    push_http: httpx.AsyncClient,
    push_clock: FrozenClock,
    taken: str,
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        phone = await scene.gateway.authenticate_device(scene.devices["ana-phone"])
        await scene.gateway.hold_link(phone, 60)  # a live link: it gets the first second
        call = await scene.light()
        [row] = await scene.rows(call["id"])
        assert row.not_before == push_clock.now() + timedelta(seconds=scene.gateway.limits.live_ack_seconds)
        await scene.pushes()
        if taken == "fetched":
            assert [i["id"] for i in await scene.fetch("ana-phone")] == [call["id"]]
        else:
            assert await scene.answer("ana-phone", call["id"]) == 200
        push_clock.advance(1)
        await scene.pushes()

        assert fakes.seen == []
        [row] = await scene.rows(call["id"])
        assert row.status is OutboxStatus.SKIPPED


async def test_a_call_a_live_device_did_not_take_within_its_second_is_pushed(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        phone = await scene.gateway.authenticate_device(scene.devices["ana-phone"])
        await scene.gateway.hold_link(phone, 60)
        call = await scene.light()
        push_clock.advance(0.9)
        await scene.pushes()
        assert fakes.seen == []  # not before its second is up
        push_clock.advance(0.1)
        await scene.pushes()
        assert [m["data"] for m in _relay_messages(fakes)] == [{"invocation_id": call["id"]}]


async def test_an_approval_is_pushed_to_every_device_that_can_sign_and_not_once_it_is_decided(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        browser = fakes.subscribe("ana-browser")
        await scene.enrol("ana-browser", {"kind": "webpush", "token": browser.token})
        await scene.enrol("desk-lamp", None)  # no push target: nothing to send it
        sms = {"to": "+15551234567", "body": "on my way"}
        first = await scene.invoke("device__ana_phone__sms_send", sms, origin="untrusted")
        assert first["status"] == "awaiting_approval"
        await scene.pushes()
        [approval_id] = {m["data"]["approval_id"] for m in _relay_messages(fakes)}
        [seen] = fakes.route_seen("webpush")
        assert json.loads(seen.plaintext)["data"] == {"approval_id": approval_id}
        assert json.loads(seen.plaintext)["event"] == "approval.requested"

        # Within the coalescing pause the next approval waits; decided meanwhile, it is never pushed.
        second = await scene.invoke("device__ana_phone__sms_send", sms, origin="untrusted")
        await scene.pushes()
        assert len(fakes.seen) == 2
        [pending] = [
            a
            for a in (await scene.client.get("/v1/inbox", headers=bearer(scene.devices["ana-phone"]))).json()[
                "approvals"
            ]
            if a["id"] != approval_id
        ]
        r = await scene.client.post(
            f"/v1/approvals/{pending['id']}",
            json={"decision": "denied"},
            headers=bearer(scene.world.operator),
        )
        assert r.status_code == 200, r.text
        push_clock.advance(scene.gateway.limits.push_coalesce_seconds)
        await scene.pushes()
        assert len(fakes.seen) == 2
        assert {row.status for row in await scene.rows(pending["id"])} == {OutboxStatus.SKIPPED}
        assert second["status"] == "awaiting_approval"


async def test_a_burst_of_calls_for_one_device_becomes_one_push_now_and_one_after_the_pause(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        calls = [await scene.light()]
        await scene.pushes()
        calls += [await scene.light() for _ in range(5)]  # the burst, within the pause that push began
        await scene.pushes()
        assert len(fakes.seen) == 1
        push_clock.advance(scene.gateway.limits.push_coalesce_seconds)
        await scene.pushes()
        assert len(fakes.seen) == 2  # one for the first call, one for the five behind it
        statuses = [row.status for call in calls for row in await scene.rows(call["id"])]
        assert statuses.count(OutboxStatus.SENT) == 2
        assert statuses.count(OutboxStatus.COALESCED) == 4
        assert {c["id"] for c in calls} == {i["id"] for i in await scene.fetch("ana-phone")}


async def test_a_burst_of_wake_ups_for_one_user_reaches_their_phones_at_most_the_cap_times_a_window(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    # A two-minute window keeps the frozen clock within the relay's 300 s timestamp tolerance.
    settings = device_settings.model_copy(update={"push_window_seconds": 120})
    async with push_scene(settings, fakes, push_http, push_clock) as scene:
        await scene.enrol("desk-lamp", {"kind": "fcm", "token": "fcm-desk-lamp"})
        limits = scene.gateway.limits
        capped_calls = []
        for n in range(20):  # spaced past the coalescing pause: each would be a push of its own
            call = await scene.light("ana-phone" if n % 2 else "desk-lamp")
            await scene.pushes()
            push_clock.advance(6)
            if n >= limits.push_cap:
                capped_calls.append(call["id"])

        assert len(fakes.seen) == limits.push_cap == 10
        capped = [e for e in await scene.audit() if e["action"] == "push.capped"]
        assert sorted(e["subject"] for e in capped) == sorted(capped_calls)
        assert {e["outcome"] for e in capped} == {"capped"}
        assert await scene.metric('tapgate_push_withheld_total{reason="capped"}') == 10
        push_clock.advance(1)  # the first push leaves the window: one more may go
        await scene.light()
        await scene.light("desk-lamp")
        await scene.pushes()
        assert len(fakes.seen) == 11


# -- failures and retries ------------------------------------------------------------------------------------

# fault -> (requests the relay sees, the row's final status)
RELAY_FAULTS = {
    "500": (3, OutboxStatus.FAILED),
    "503": (3, OutboxStatus.FAILED),
    "timeout": (3, OutboxStatus.FAILED),
    "reset": (3, OutboxStatus.FAILED),
    "slow-body": (3, OutboxStatus.FAILED),
    "429": (3, OutboxStatus.FAILED),
    "401": (1, OutboxStatus.FAILED),
    "403": (1, OutboxStatus.FAILED),
    "301": (1, OutboxStatus.FAILED),
    "302": (1, OutboxStatus.FAILED),
    "307": (1, OutboxStatus.FAILED),
    "200-body": (1, OutboxStatus.SENT),
}


@pytest.mark.parametrize(("fault", "expected"), RELAY_FAULTS.items(), ids=list(RELAY_FAULTS))
async def test_the_worker_tries_a_relay_three_times_on_network_errors_and_5xx_once_on_a_refusal_then_journals(
    device_settings: Settings,
    fakes: PushFakes,
    push_http: httpx.AsyncClient,
    push_clock: FrozenClock,
    fault: str,
    expected: tuple[int, OutboxStatus],
) -> None:
    tries, final = expected
    url = fakes.reset_url if fault == "reset" else f"{fakes.base_url}/relay/{fault}"
    hits = "reset" if fault == "reset" else f"relay/{fault}"
    seconds = SHORT_TIMEOUT if fault in ("timeout", "slow-body") else SENDER_TIMEOUT
    async with push_scene(
        device_settings, fakes, push_http, push_clock, {"fcm": url}, sender_seconds=seconds
    ) as scene:
        call = await scene.light()
        await scene.pushes()
        assert fakes.hits[hits] == 1
        for attempt, wait in enumerate(RETRIES, start=2):
            push_clock.advance(wait - 0.5)
            await scene.pushes()
            assert fakes.hits[hits] == min(attempt - 1, tries)  # never before its back-off is up
            push_clock.advance(0.5)
            await scene.pushes()
            assert fakes.hits[hits] == min(attempt, tries)
        push_clock.advance(60)  # and never again
        await scene.pushes()
        assert fakes.hits[hits] == tries
        assert fakes.hits["redirect-target"] == 0

        [row] = await scene.rows(call["id"])
        assert (row.status, row.attempts) == (final, tries)
        failed = [e for e in await scene.audit() if e["action"] == "push.failed"]
        if final is OutboxStatus.SENT:
            assert failed == []
        else:
            [entry] = failed
            assert entry["subject"] == call["id"]
            assert entry["data"] == {
                "delivery_id": row.delivery_id,
                "event": "invocation.pending",
                "user_id": "ana",
                "device_id": "ana-phone",
                "attempts": tries,
                "error": "push_failed",
                "retryable": tries == 3,
            }
            assert entry["reason"] == ""
            journal = json.dumps(failed)
            for text in ("Open tapgate", "fcm-ana-phone", "127.0.0.1", "relay/"):
                assert text not in journal
            assert await scene.metric("tapgate_push_failed_total") == 1
        # A push is a hint: the call is still there to fetch and answer.
        assert [i["id"] for i in await scene.fetch("ana-phone")] == [call["id"]]
        assert await scene.answer("ana-phone", call["id"]) == 200


async def test_a_dead_web_push_subscription_is_dropped_from_its_device_and_journalled(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        browser = fakes.subscribe("ana-browser", status=410)
        await scene.enrol("ana-browser", {"kind": "webpush", "token": browser.token})
        call = await scene.light("ana-browser")
        await scene.pushes()
        push_clock.advance(1)

        assert fakes.hits["webpush"] == 1
        [row] = await scene.rows(call["id"])
        assert (row.status, row.attempts) == (OutboxStatus.FAILED, 1)  # never tried again
        entries = await scene.audit()
        [removed] = [e for e in entries if e["action"] == "device.push_removed"]
        assert removed["subject"] == "ana-browser"
        assert removed["data"]["kind"] == "webpush" and removed["data"]["delivery_id"] == row.delivery_id
        [failed] = [e for e in entries if e["action"] == "push.failed"]
        assert failed["data"]["error"] == "push_subscription_gone"
        devices = (
            await scene.client.get("/v1/users/ana/devices", headers=bearer(scene.world.operator))
        ).json()
        assert {d["device_id"]: d["push"] for d in devices["devices"]}["ana-browser"] is None
        after = await scene.light("ana-browser")
        assert await scene.rows(after["id"]) == []  # no address, no push row
        assert [i["id"] for i in await scene.fetch("ana-browser")] == [call["id"], after["id"]]


async def test_a_device_that_never_gets_a_push_still_finds_all_its_work_by_fetching(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    relays = {"fcm": f"{fakes.base_url}/relay/403"}
    async with push_scene(device_settings, fakes, push_http, push_clock, relays=relays) as scene:
        calls = []
        for _ in range(4):
            calls.append((await scene.light())["id"])
            push_clock.advance(1)
        sms = {"to": "+15551234567", "body": "running late"}
        calls.append((await scene.invoke("device__ana_phone__sms_send", sms))["id"])
        asked = await scene.invoke("device__ana_phone__sms_send", sms, origin="untrusted")
        for _ in range(3):
            await scene.pushes()
            push_clock.advance(60)

        assert fakes.route_seen("relay") == []  # every push was refused
        assert [i["id"] for i in await scene.fetch("ana-phone")] == calls
        inbox = (await scene.client.get("/v1/inbox", headers=bearer(scene.devices["ana-phone"]))).json()
        assert [a["binding_code"] for a in inbox["approvals"]] == [asked["binding_code"]]
        for call_id in calls:
            assert await scene.answer("ana-phone", call_id) == 200
        assert asked["status"] == "awaiting_approval"


async def test_a_device_whose_push_kind_nothing_serves_is_skipped_without_a_journal_entry(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    phone_push = {"kind": "hms", "token": "hms-token"}
    async with push_scene(device_settings, fakes, push_http, push_clock, phone_push=phone_push) as scene:
        call = await scene.light()
        await scene.pushes()
        [row] = await scene.rows(call["id"])
        assert row.status is OutboxStatus.SKIPPED
        assert row.last_error == "no push sender or relay serves 'hms'"
        assert not [e for e in await scene.audit() if e["action"].startswith("push.")]


# -- what a push may carry (G16) -----------------------------------------------------------------------------


async def test_no_argument_or_result_text_reaches_any_push_service(
    device_settings: Settings,
    fakes: PushFakes,
    push_http: httpx.AsyncClient,
    push_clock: FrozenClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Gate G16: a canary in every argument of an sms_send and in the device's result never reaches a
    push body or header (the relay's, and Web Push's after decryption), nor a log line."""
    caplog.set_level(logging.DEBUG)
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        browser = fakes.subscribe("ana-browser")
        await scene.enrol("ana-browser", {"kind": "webpush", "token": browser.token})
        sms = {"to": f"+15551234567 {CANARY}", "body": f"meet at {CANARY}"}
        asked = await scene.invoke("device__ana_phone__sms_send", sms, origin="untrusted")
        await scene.pushes()  # approval.requested to the phone (relay) and the browser (Web Push)
        inbox = (await scene.client.get("/v1/inbox", headers=bearer(scene.devices["ana-phone"]))).json()
        r = await scene.client.post(
            f"/v1/approvals/{inbox['approvals'][0]['id']}",
            json={"decision": "approved"},
            headers=bearer(scene.world.operator),
        )
        assert r.status_code == 200, r.text
        push_clock.advance(60)
        await scene.pushes()  # invocation.pending for the approved call
        push_clock.advance(60)
        plain = await scene.invoke("device__ana_phone__sms_send", sms)
        await scene.pushes()  # ... and for the plain one
        for call in (asked, plain):
            assert await scene.answer("ana-phone", call["id"], "sent", message=f"sent {CANARY}") == 200
        r = await scene.client.post(
            "/v1/notices", json={"event": "run.finished", "ui": {"body": CANARY}}, headers=scene.agent
        )
        assert r.status_code == 202
        push_clock.advance(60)
        await scene.pushes()

        events = [json.loads(s.body)["event"] for s in fakes.route_seen("relay")]
        assert events == ["approval.requested", "invocation.pending", "invocation.pending", "run.finished"]
        assert [json.loads(s.plaintext)["event"] for s in fakes.route_seen("webpush")] == [
            "approval.requested",
            "run.finished",
        ]
        for seen in fakes.seen:
            assert CANARY.encode() not in seen.everything(), seen.route
        lines = [JsonFormatter().format(record) for record in caplog.records]
        assert lines and not [line for line in lines if CANARY in line]


# -- crashes, restarts and claims ----------------------------------------------------------------------------


async def test_a_push_queued_before_the_gateway_stopped_is_sent_once_by_the_next_one(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        phone = await scene.gateway.authenticate_device(scene.devices["ana-phone"])
        await scene.gateway.hold_link(phone, 60)
        call = await scene.light()  # due in a second, when this gateway is gone
        tenant = scene.world.tenant
    assert fakes.seen == []
    push_clock.advance(1)
    async with asgi_client(device_settings, push_clock, push_router(push_http, fakes, push_clock)) as client:
        gateway = client.app.state.gateway  # type: ignore[attr-defined]
        await gateway.send_pushes()
        await gateway.send_pushes()
        async with gateway.store.unit_of_work(tenant) as uow:
            [row] = await uow.outbox.for_subject(call["id"])
    assert [m["data"] for m in _relay_messages(fakes)] == [{"invocation_id": call["id"]}]
    assert (row.status, row.attempts) == (OutboxStatus.SENT, 1)


async def test_a_row_claimed_by_a_worker_that_died_is_sent_by_another_once_its_claim_lapses(
    device_settings: Settings, fakes: PushFakes, push_http: httpx.AsyncClient, push_clock: FrozenClock
) -> None:
    async with push_scene(device_settings, fakes, push_http, push_clock) as scene:
        phone = await scene.gateway.authenticate_device(scene.devices["ana-phone"])
        await scene.gateway.hold_link(phone, 600)
        call = await scene.light()
        push_clock.advance(1)
        ctx = scene.gateway.ctx
        # A worker claims the row and dies before its send: nothing is recorded.
        died = await claim(ctx, scene.sender, scene.world.tenant, 10, PushStats())
        assert [s.item.subject_id for s in died.sends] == [call["id"]]
        await scene.pushes()
        assert fakes.seen == []  # the claim holds
        push_clock.advance(ctx.limits.push_lease_seconds)
        await scene.pushes()
        await scene.pushes()

        assert [m["data"] for m in _relay_messages(fakes)] == [{"invocation_id": call["id"]}]
        [row] = await scene.rows(call["id"])
        assert (row.status, row.attempts) == (OutboxStatus.SENT, 2)
