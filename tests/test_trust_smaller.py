"""The smaller trust items of DESIGN §15, each tried as an attacker would: notice data is secret-scanned,
the scan sees keys split, joined, encoded or broken by invisible characters, ingested text shows its
hidden characters."""

from __future__ import annotations

import base64
import json
import re

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.push.webpush import DEFAULT_HOSTS, WebPushSender, push_host_allowed
from tapgate.config import Settings
from tapgate.domain.errors import InvalidInput, PushFailed, SecretRefused
from tapgate.domain.notices import check_notice
from tapgate.domain.secret_scan import check_outbound, scan
from tests.conftest import asgi_client, tenant_name
from tests.pushfakes import new_accounts
from tests.test_push_senders import message as push_message
from tests.test_secret_scan import HIDDEN_SECRETS, ORDINARY
from tests.world import LAMP, World, bearer, device_body

GITHUB = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"


def test_notice_data_that_holds_a_key_is_refused_like_ui() -> None:
    assert check_notice("goal.done", {"goal_id": "g-1"}, None, False).data == {"goal_id": "g-1"}
    with pytest.raises(InvalidInput) as refused:
        check_notice("goal.done", {"goal_id": GITHUB}, None, False)
    assert refused.value.field == "data.goal_id" and GITHUB not in refused.value.message


# -- the secret scan sees keys split, joined across arguments, or hex-encoded -------------------------


def _spaced(key: str, every: int, separator: str) -> str:
    return separator.join(key[i : i + every] for i in range(0, len(key), every))


@pytest.mark.parametrize("separator", [" ", "-", ".", "\n", " - "])
def test_a_key_split_by_separators_is_still_found(separator: str) -> None:
    text = f"here it is: {_spaced(GITHUB, 4, separator)} thanks"
    assert scan(GITHUB) is not None and scan(text) is not None


def test_an_aws_key_split_by_dashes_is_found() -> None:
    assert scan("AKIA-" + _spaced("Z7Q2M4R6T5V3W5X2", 4, "-")) is not None


def test_a_hex_encoded_key_is_found() -> None:
    encoded = GITHUB.encode().hex()
    assert scan(f"payload {encoded}") is not None
    assert scan(f"commit {'0123456789abcdef' * 4}") is None  # a hash is still an identifier


def test_a_key_split_across_two_arguments_is_refused_naming_both() -> None:
    check_outbound([("to", "+15550001111"), ("body", "hello there")])
    with pytest.raises(SecretRefused) as refused:
        check_outbound([("title", GITHUB[:20]), ("body", GITHUB[20:])])
    assert "title + body" in refused.value.message and GITHUB not in refused.value.message


def test_words_run_together_are_not_taken_for_a_token() -> None:
    texts = [
        "Call +44 20 7946 0958: Anna says hello to everyone at the office today, see you",
        "Order 4411-2298-7765 ships to the warehouse; tracking 1Z 999 AA1 01 2345 6784 tomorrow",
        "meeting at 10:30 Agenda: budget review, hiring plan and the quarterly roadmap",
    ]
    assert [t for t in texts if scan(t) is not None] == []


def test_the_corpus_false_positive_rate_stays_zero() -> None:
    assert [text for text in ORDINARY if scan(text) is not None] == []


def test_notice_data_that_holds_a_key_split_by_underscores_is_refused() -> None:
    key = "AKIA" + "Q3EGRXQ5LZ2YTB7M"
    split = "_".join(key[i : i + 4] for i in range(0, len(key), 4))
    with pytest.raises(InvalidInput) as refused:
        check_notice("goal.done", {"goal_id": split}, None, False)
    assert refused.value.field == "data.goal_id" and "Q3EG" not in refused.value.message


# Forms whose characters the argument check refuses before the scan reads the text.
_REFUSED_AS_FORMAT = {"zero_width", "soft_hyphen"}


async def test_an_sms_body_that_hides_a_key_is_refused_before_any_row_whichever_way(
    device_api: httpx.AsyncClient,
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    agent = bearer(await world.agent("ana"))
    phone = device_body(
        "ana-phone", [{"name": "sms_send"}], grants=["sms_send"], push={"kind": "fcm", "token": "t"}
    )
    await world.enrol("ana", phone)
    forms = {case["form"]: case["text"] for case in reversed(HIDDEN_SECRETS)}
    assert len(forms) >= 12
    for number, (form, body) in enumerate(sorted(forms.items())):
        call = {
            "tool": "device__ana_phone__sms_send",
            "arguments": {"to": "+15551234567", "body": body},
            "invocation_id": f"hidden-{number}",
        }
        view = (await device_api.post("/v1/invocations", json=call, headers=agent)).json()
        assert view["status"] == "refused" and view["result"] is None, (form, view)
        if form in _REFUSED_AS_FORMAT:
            assert "a control, format or invisible character" in view["reason"], (form, view)
        else:
            assert view["reason"].startswith("[deny] the text of 'body' looks like a secret"), (form, view)
        assert (await device_api.get(f"/v1/invocations/hidden-{number}", headers=agent)).status_code == 404


# -- /docs loads nothing from anywhere else -------------------------------------------------------------


async def test_the_api_reference_loads_no_script_and_nothing_from_another_host(
    device_api: httpx.AsyncClient,
) -> None:
    r = await device_api.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text.lower()
    assert "<script" not in page and "cdn" not in page
    assert not re.search(r"""(?:src|href)\s*=\s*['"]?(?:https?:)?//""", page)
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert "/v1/invocations" in r.text and "/v1/tokens/{token_id}" in r.text
    assert (await device_api.get("/redoc")).status_code == 404


# -- Web Push posts only to the known push services -------------------------------------------------------


def test_only_the_known_push_services_are_web_push_hosts() -> None:
    allowed = [
        "fcm.googleapis.com",
        "FCM.googleapis.com.",
        "wns2-par02p.notify.windows.com",
        "web.push.apple.com",
    ]
    refused = [
        "fcm.googleapis.com.evil.example",
        "evilnotify.windows.com",
        "169.254.169.254",
        "localhost",
        "push.example",
    ]
    assert all(push_host_allowed(h, DEFAULT_HOSTS) for h in allowed)
    assert not any(push_host_allowed(h, DEFAULT_HOSTS) for h in refused)
    assert tuple(Settings().webpush.hosts) == DEFAULT_HOSTS  # the setting's default is that list


async def test_a_subscription_on_any_other_host_is_refused_before_anything_is_sent() -> None:
    posted: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: posted.append(request) or httpx.Response(201))
    accounts = new_accounts()
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    keys = {
        "p256dh": base64.urlsafe_b64encode(point).decode(),
        "auth": base64.urlsafe_b64encode(b"a" * 16).decode(),
    }
    async with httpx.AsyncClient(transport=transport) as client:
        sender = WebPushSender(client, accounts.vapid_private_b64, accounts.vapid_subject, FrozenClock())
        for endpoint in (
            "https://169.254.169.254/latest/meta-data",
            "https://fcm.googleapis.com.evil.example/x",
        ):
            token = json.dumps({"endpoint": endpoint, "keys": keys})
            with pytest.raises(PushFailed) as refused:
                await sender.send(push_message("webpush", token))
            assert refused.value.retryable is False and "known push service" in str(refused.value)
    assert posted == []


# -- an agent reads the calls its own agent made ---------------------------------------------------------


async def test_an_agent_reads_only_its_own_agents_calls_and_the_user_reads_all_of_theirs(
    device_api: httpx.AsyncClient,
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    await world.person("bob")
    await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    assistant = bearer(await world.agent("ana", "assistant"))
    planner = bearer(await world.agent("ana", "planner"))
    ana = bearer(await world.token("ana", "user"))
    bob = bearer(await world.token("bob", "user"))
    call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}}
    made = (await device_api.post("/v1/invocations", json=call, headers=assistant)).json()["id"]
    assert (await device_api.get(f"/v1/invocations/{made}", headers=assistant)).status_code == 200
    theirs = await device_api.get(f"/v1/invocations/{made}", headers=planner)
    unknown = await device_api.get("/v1/invocations/inv_nosuchcall", headers=planner)
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["error"]["code"] == unknown.json()["error"]["code"]
    mine = await device_api.get(f"/v1/invocations/{made}", headers=ana)
    assert mine.status_code == 200 and mine.json()["id"] == made
    assert (await device_api.get(f"/v1/invocations/{made}", headers=bob)).status_code == 404


# -- an invocation id is its user's own -------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_two_people_may_choose_one_invocation_id_and_neither_learns_of_the_other(
    engine: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    url = (
        request.getfixturevalue("sqlite_url")
        if engine == "sqlite"
        else request.getfixturevalue("postgres").app_url
    )
    config = Settings(database_url=url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(config, clock) as api:
        world = await World(api, tenant=tenant_name()).start()
        lamp = {}
        for person in ("ana", "bob"):
            await world.person(person)
            body = device_body(f"{person}-lamp", [LAMP], grants=["set_light"])
            lamp[person] = bearer(await world.enrol(person, body))
        ana = bearer(await world.agent("ana", "assistant"))
        bob = bearer(await world.agent("bob", "assistant"))
        ana_call = {
            "tool": "device__ana_lamp__set_light",
            "arguments": {"on": True},
            "invocation_id": "call-1",
        }
        bob_call = {
            "tool": "device__bob_lamp__set_light",
            "arguments": {"on": False},
            "invocation_id": "call-1",
        }
        first = await api.post("/v1/invocations", json=ana_call, headers=ana)
        second = await api.post("/v1/invocations", json=bob_call, headers=bob)
        assert first.status_code == second.status_code == 200  # no 409: bob's id never meets ana's
        assert first.json()["id"] == second.json()["id"] == "call-1"
        assert (await api.post("/v1/invocations", json=bob_call, headers=bob)).json() == second.json()
        bobs = (await api.get("/v1/invocations/call-1", headers=bob)).json()
        anas = (await api.get("/v1/invocations/call-1", headers=ana)).json()
        assert (bobs["tool"], anas["tool"]) == (bob_call["tool"], ana_call["tool"])
        # Each device is handed its own call, and answering one leaves the other open.
        done = {"status": "done"}
        answered = await api.post("/v1/device/invocations/call-1/result", json=done, headers=lamp["ana"])
        assert answered.status_code == 200
        assert (await api.get("/v1/invocations/call-1", headers=bob)).json()["status"] == "pending"
        assert (await api.get("/v1/invocations/call-1", headers=ana)).json()["status"] == "done"


async def test_another_agent_of_the_person_reusing_an_id_gets_409_not_the_first_agents_call(
    device_api: httpx.AsyncClient,
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    assistant = bearer(await world.agent("ana", "assistant"))
    planner = bearer(await world.agent("ana", "planner"))
    call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}, "invocation_id": "call-1"}
    assert (await device_api.post("/v1/invocations", json=call, headers=assistant)).status_code == 200
    replay = await device_api.post("/v1/invocations", json=call, headers=planner)
    assert replay.status_code == 409 and "status" not in replay.json()
