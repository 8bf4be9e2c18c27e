"""The push senders against loopback fakes that check what they receive, and the relay's verify helper."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.push import ApnsSender, FcmSender, PushRouter, RelaySender, WebPushSender
from tapgate.adapters.push.apns import apns_id
from tapgate.adapters.push.relay import NOTE
from tapgate.domain.devices import PushTarget
from tapgate.domain.errors import ConfigurationError, PushFailed, RelayVerificationError, SubscriptionGone
from tapgate.domain.push import PushMessage
from tapgate.relay import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    DeliveryCache,
    sign,
    verify,
)
from tests.conftest import SENDER_TIMEOUT, SHORT_TIMEOUT
from tests.pushfakes import LoopbackServer, PushFakes, Seen, b64url, fcm_error, jwt_parts, new_accounts

BACKOFF = (0.5, 2.0)
APNS_TOKEN = "a1" * 32
TENANT_CANARY = "tenant-canary-5b1e"  # the tenant is the server's business: it never leaves in a push
DATA = {"approval_id": "apr_7f3a", "invocation_id": "inv_2c9d", "urgent": True}
TITLE = "A step needs your answer"
BODY = "Open tapgate to see it."


# -- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[PushFakes]:
    with LoopbackServer(PushFakes(new_accounts())) as fakes:
        yield fakes


@pytest.fixture
def fakes(server: PushFakes) -> Iterator[PushFakes]:
    server.reset()
    yield server
    assert server.problems == []


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(datetime.now(UTC).replace(microsecond=0))


class Attempts:
    """Counts the requests a client sends (every attempt, even one that never connects)."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, request: httpx.Request) -> None:
        self.count += 1


@pytest.fixture
def attempts() -> Attempts:
    return Attempts()


@pytest.fixture
async def client(attempts: Attempts) -> AsyncIterator[httpx.AsyncClient]:
    # follow_redirects=True: the senders must refuse to follow whatever their client would do.
    async with httpx.AsyncClient(
        timeout=SENDER_TIMEOUT, follow_redirects=True, event_hooks={"request": [attempts]}
    ) as http:
        yield http


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def message(kind: str, token: str, **changes: Any) -> PushMessage:
    fields: dict[str, Any] = {
        "delivery_id": "dlv_" + secrets.token_hex(8),
        "event": "approval.requested",
        "tenant_id": TENANT_CANARY,
        "user_id": "ana",
        "device_id": "ana-phone",
        "target": PushTarget(kind, token),
        "title": TITLE,
        "body": BODY,
        "data": DATA,
    }
    return PushMessage(**(fields | changes))


def relay_sender(
    client: httpx.AsyncClient,
    fakes: PushFakes,
    clock: FrozenClock,
    url: str,
    sleeps: Sleeps | None = None,
    timeout: float = SENDER_TIMEOUT,
) -> RelaySender:
    return RelaySender(
        client,
        {"fcm": url, "mipush": url},
        fakes.accounts.relay_secret,
        clock,
        backoff=BACKOFF,
        timeout=timeout,
        sleep=sleeps or Sleeps(),
    )


def webpush_sender(client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock) -> WebPushSender:
    accounts = fakes.accounts
    return WebPushSender(
        client,
        accounts.vapid_private_b64,
        accounts.vapid_subject,
        clock,
        https_only=False,
        hosts=(
            "127.0.0.1",
            "localhost",
        ),  # the loopback fakes: the default list names the real push services only
        timeout=SENDER_TIMEOUT,
    )


def apns_sender(client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock) -> ApnsSender:
    a = fakes.accounts
    return ApnsSender(
        client,
        a.apns_team,
        a.apns_key_id,
        a.apns_pem,
        a.apns_topic,
        clock,
        endpoint=fakes.base_url,
        timeout=SENDER_TIMEOUT,
    )


def service_account(fakes: PushFakes) -> dict[str, str]:
    a = fakes.accounts
    return {
        "type": "service_account",
        "project_id": a.fcm_project,
        "private_key_id": a.fcm_key_id,
        "private_key": a.fcm_pem,
        "client_email": a.fcm_email,
        "token_uri": f"{fakes.base_url}/oauth2/token",
    }


def fcm_sender(client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock) -> FcmSender:
    return FcmSender(
        client,
        fakes.accounts.fcm_project,
        service_account(fakes),
        clock,
        endpoint=fakes.base_url,
        timeout=SENDER_TIMEOUT,
    )


async def fails(sender: Any, push: PushMessage) -> PushFailed:
    with anyio.fail_after(30):
        with pytest.raises(PushFailed) as caught:
            await sender.send(push)
    return caught.value


async def sends(sender: Any, push: PushMessage) -> None:
    with anyio.fail_after(30):
        await sender.send(push)


def key_tree(value: object) -> object:
    """The shape of a JSON value: its keys all the way down, leaves as None."""
    if isinstance(value, dict):
        return {k: key_tree(v) for k, v in value.items()}
    return None


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/relay"


# -- the relay -----------------------------------------------------------------------------------------------


async def test_the_relay_gets_a_signed_canonical_body_naming_the_device_and_its_push_address(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    push = message("fcm", "fcm-device-token")
    await sends(relay_sender(client, fakes, clock, f"{fakes.base_url}/relay/ok"), push)

    [seen] = fakes.route_seen("relay")  # and tapgate.relay.verify accepted it in the fake
    body = json.loads(seen.body)
    assert seen.body == json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert body == {
        "event": "approval.requested",
        "delivery_id": push.delivery_id,
        "device": {"id": "ana-phone", "user_id": "ana", "push": {"kind": "fcm", "token": "fcm-device-token"}},
        "ui": {"title": TITLE, "body": BODY},
        "data": DATA,
        "note": NOTE,
    }
    assert seen.headers[EVENT_HEADER] == "approval.requested"
    assert seen.headers[DELIVERY_HEADER] == push.delivery_id
    assert seen.headers[TIMESTAMP_HEADER] == str(int(clock.now().timestamp()))
    signed_text = f"{seen.headers[TIMESTAMP_HEADER]}.{push.delivery_id}.".encode() + seen.body
    mac = hmac.new(fakes.accounts.relay_secret.encode(), signed_text, hashlib.sha256).hexdigest()
    assert seen.headers[SIGNATURE_HEADER] == f"sha256={mac}"  # worked out here, not by tapgate.relay.sign
    assert seen.headers["content-type"] == "application/json"


async def test_a_kind_without_a_relay_fails_for_good_without_a_request(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock, attempts: Attempts
) -> None:
    failure = await fails(
        relay_sender(client, fakes, clock, f"{fakes.base_url}/relay/ok"), message("hms", "t")
    )
    assert failure.retryable is False
    assert attempts.count == 0


# fault -> (attempts, the final PushFailed.retryable, or None for success)
RELAY_FAULTS = {
    "500": (3, True),
    "503": (3, True),
    "timeout": (3, True),
    "slow-body": (3, True),
    "reset": (3, True),
    "refused": (3, True),
    "401": (1, False),
    "403": (1, False),
    "404": (1, False),
    "429": (1, True),
    "301": (1, False),
    "302": (1, False),
    "307": (1, False),
    "200-body": (1, None),
}


@pytest.mark.parametrize(("fault", "expected"), RELAY_FAULTS.items(), ids=list(RELAY_FAULTS))
async def test_the_relay_sender_tries_three_times_on_network_errors_and_5xx_and_once_on_anything_else(
    client: httpx.AsyncClient,
    fakes: PushFakes,
    clock: FrozenClock,
    attempts: Attempts,
    fault: str,
    expected: tuple[int, bool | None],
) -> None:
    tries, retryable = expected
    url = {"reset": fakes.reset_url, "refused": closed_port_url()}.get(
        fault, f"{fakes.base_url}/relay/{fault}"
    )
    sleeps = Sleeps()
    seconds = SHORT_TIMEOUT if fault in ("timeout", "slow-body") else SENDER_TIMEOUT
    sender = relay_sender(client, fakes, clock, url, sleeps, seconds)
    push = message("mipush", "mi-token")

    if retryable is None:
        await sends(sender, push)
    else:
        assert (await fails(sender, push)).retryable is retryable

    assert attempts.count == tries
    assert sleeps.waits == list(BACKOFF[: tries - 1])
    if fault != "refused":
        assert fakes.hits[fault if fault == "reset" else f"relay/{fault}"] == tries
    assert fakes.hits["redirect-target"] == 0  # a redirect is never followed


async def test_a_relay_that_took_an_earlier_attempt_sees_the_retry_as_a_replay(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    sender = relay_sender(client, fakes, clock, f"{fakes.base_url}/relay/ok")
    push = message("fcm", "fcm-device-token")
    await sends(sender, push)
    await sends(sender, push)  # the outbox tries the row again: same delivery id
    assert len(fakes.route_seen("relay")) == 1
    assert fakes.hits["replayed"] == 1


# -- the relay author's verify helper ---------------------------------------------------------------------

SECRET = "s3cret-relay-key"
NOW = 1_767_225_600.0


def signed(body: bytes | None = None, at: float = NOW, secret: str = SECRET) -> tuple[dict[str, str], bytes]:
    push = message("fcm", "fcm-device-token", delivery_id="dlv_verify1")
    raw = RelaySender.body(push) if body is None else body
    headers = {
        EVENT_HEADER: push.event,
        DELIVERY_HEADER: push.delivery_id,
        TIMESTAMP_HEADER: str(int(at)),
        SIGNATURE_HEADER: sign(secret, int(at), push.delivery_id, raw),
    }
    return headers, raw


def refusal(headers: dict[str, str], body: bytes, **kwargs: Any) -> str:
    with pytest.raises(RelayVerificationError) as caught:
        verify(headers, body, SECRET, **{"now": NOW, **kwargs})
    return caught.value.reason


def test_a_genuine_relay_message_verifies_and_returns_its_body() -> None:
    headers, body = signed()
    message_ = verify(headers, body, SECRET, now=NOW, seen=DeliveryCache())
    assert message_["delivery_id"] == "dlv_verify1"
    assert message_["device"]["push"] == {"kind": "fcm", "token": "fcm-device-token"}


def test_verify_reads_header_names_in_any_case() -> None:
    headers, body = signed()
    assert (
        verify({k.title(): v for k, v in headers.items()}, body, SECRET, now=NOW)["event"]
        == "approval.requested"
    )


def test_a_tampered_body_is_refused() -> None:
    headers, body = signed()
    assert refusal(headers, body.replace(b"ana-phone", b"bob-phone")) == "bad_signature"


def test_a_message_signed_with_another_secret_is_refused() -> None:
    headers, body = signed(secret="another-secret")
    assert refusal(headers, body) == "bad_signature"


def test_a_changed_delivery_id_or_timestamp_breaks_the_signature() -> None:
    headers, body = signed()
    assert refusal({**headers, DELIVERY_HEADER: "dlv_other"}, body) == "bad_signature"
    assert refusal({**headers, TIMESTAMP_HEADER: str(int(NOW) + 1)}, body) == "bad_signature"


def test_a_changed_event_header_is_refused_though_the_signature_does_not_cover_it() -> None:
    headers, body = signed()
    assert refusal({**headers, EVENT_HEADER: "approval.decided"}, body) == "bad_body"


@pytest.mark.parametrize(("offset", "reason"), [(-301, "stale"), (301, "future")])
def test_a_timestamp_more_than_300_seconds_off_is_refused(offset: int, reason: str) -> None:
    headers, body = signed(at=NOW + offset)
    assert refusal(headers, body) == reason


@pytest.mark.parametrize("offset", [-300, 300])
def test_a_timestamp_300_seconds_off_still_verifies(offset: int) -> None:
    headers, body = signed(at=NOW + offset)
    assert verify(headers, body, SECRET, now=NOW)["delivery_id"] == "dlv_verify1"


def test_a_replayed_delivery_id_is_refused() -> None:
    seen = DeliveryCache()
    headers, body = signed()
    verify(headers, body, SECRET, now=NOW, seen=seen)
    assert refusal(headers, body, seen=seen) == "replayed"


def test_a_refused_message_does_not_make_the_genuine_one_a_replay() -> None:
    seen = DeliveryCache()
    headers, body = signed()
    assert refusal({**headers, SIGNATURE_HEADER: "sha256=" + "0" * 64}, body, seen=seen) == "bad_signature"
    assert verify(headers, body, SECRET, now=NOW, seen=seen)["delivery_id"] == "dlv_verify1"


@pytest.mark.parametrize("missing", [EVENT_HEADER, DELIVERY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER])
def test_a_message_missing_a_header_is_refused(missing: str) -> None:
    headers, body = signed()
    del headers[missing]
    assert refusal(headers, body) == "missing_header"


@pytest.mark.parametrize("stamp", ["-5", "1e9", " 1767225600", "１７６７２２５６００", ""])
def test_a_timestamp_that_is_not_plain_digits_is_refused(stamp: str) -> None:
    headers, body = signed()
    assert refusal({**headers, TIMESTAMP_HEADER: stamp}, body) == "bad_timestamp"


def test_the_delivery_cache_stays_bounded_and_forgets_what_can_no_longer_pass() -> None:
    cache = DeliveryCache(max_entries=2)
    assert cache.add("a", until=NOW + 300, now=NOW)
    assert cache.add("b", until=NOW + 300, now=NOW)
    assert cache.add("c", until=NOW + 300, now=NOW)
    assert len(cache) == 2 and cache.add("a", until=NOW + 300, now=NOW)  # "a" was forgotten: the oldest
    assert cache.add(
        "d", until=NOW + 600, now=NOW + 301
    )  # "c" and "a" expired: the timestamp check refuses them
    assert len(cache) == 1


# -- Web Push ------------------------------------------------------------------------------------------------


async def test_a_web_push_is_encrypted_to_the_subscription_and_signed_for_its_endpoint(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    subscription = fakes.subscribe("phone")
    push = message("webpush", subscription.token)
    await sends(webpush_sender(client, fakes, clock), push)

    [seen] = fakes.route_seen("webpush")  # the fake verified the VAPID JWT and decrypted the body
    assert json.loads(seen.plaintext) == push.payload()
    assert push.delivery_id.encode() not in seen.body  # it travels encrypted
    assert seen.headers["urgency"] == "high"
    assert seen.headers["ttl"] == "3600"


async def test_each_web_push_is_signed_for_its_own_endpoints_origin(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    sender = webpush_sender(client, fakes, clock)
    await sends(sender, message("webpush", fakes.subscribe("one", host="127.0.0.1").token))
    await sends(sender, message("webpush", fakes.subscribe("two", host="localhost").token))

    audiences = [jwt_parts(_vapid_token(s))[1]["aud"] for s in fakes.route_seen("webpush")]
    port = fakes.base_url.rsplit(":", 1)[1]
    assert audiences == [f"http://127.0.0.1:{port}", f"http://localhost:{port}"]


def _vapid_token(seen: Seen) -> str:
    return seen.headers["authorization"].split("t=", 1)[1].split(",", 1)[0]


@pytest.mark.parametrize(
    ("status", "gone", "retryable"),
    [
        (404, True, False),
        (410, True, False),
        (429, False, True),
        (500, False, True),
        (503, False, True),
        (400, False, False),
        (403, False, False),
        (413, False, False),
    ],
)
async def test_the_web_push_services_answer_says_whether_the_subscription_is_gone_or_worth_a_retry(
    client: httpx.AsyncClient,
    fakes: PushFakes,
    clock: FrozenClock,
    attempts: Attempts,
    status: int,
    gone: bool,
    retryable: bool,
) -> None:
    subscription = fakes.subscribe("faulty", status=status)
    failure = await fails(webpush_sender(client, fakes, clock), message("webpush", subscription.token))
    assert isinstance(failure, SubscriptionGone) is gone
    assert failure.retryable is retryable
    assert attempts.count == 1


ENDPOINT = "https://push.example/x"
NOT_ON_CURVE = "BA" + "A" * 85  # 65 bytes starting 0x04, but no point of P-256
AUTH_16 = "A" * 22
GOOD_KEYS = {
    "p256dh": b64url(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    ),
    "auth": AUTH_16,
}
UNUSABLE_SUBSCRIPTIONS = {
    "not JSON": "not json",
    "not an object": "[]",
    "no keys": {"endpoint": ENDPOINT},
    "short keys": {"endpoint": ENDPOINT, "keys": {"p256dh": "AAAA", "auth": "AAAA"}},
    "not base64": {"endpoint": ENDPOINT, "keys": {**GOOD_KEYS, "p256dh": "!!!!"}},
    "short auth": {"endpoint": ENDPOINT, "keys": {**GOOD_KEYS, "auth": "AAAA"}},
    "off the curve": {"endpoint": ENDPOINT, "keys": {**GOOD_KEYS, "p256dh": NOT_ON_CURVE}},
    "no endpoint": {"endpoint": 5, "keys": GOOD_KEYS},
    "no host": {"endpoint": "https:///x", "keys": GOOD_KEYS},
    "bad port": {"endpoint": "https://push.example:99999/x", "keys": GOOD_KEYS},
}


@pytest.mark.parametrize("subscription", UNUSABLE_SUBSCRIPTIONS.values(), ids=list(UNUSABLE_SUBSCRIPTIONS))
async def test_an_unusable_subscription_fails_for_good_without_a_request(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock, attempts: Attempts, subscription: object
) -> None:
    token = subscription if isinstance(subscription, str) else json.dumps(subscription)
    failure = await fails(webpush_sender(client, fakes, clock), message("webpush", token))
    assert failure.retryable is False and not isinstance(failure, SubscriptionGone)
    assert attempts.count == 0


async def test_web_push_refuses_an_endpoint_that_is_not_https_unless_told_otherwise(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock, attempts: Attempts
) -> None:
    a = fakes.accounts
    sender = WebPushSender(client, a.vapid_private_b64, a.vapid_subject, clock)
    failure = await fails(sender, message("webpush", fakes.subscribe("plain").token))
    assert failure.retryable is False
    assert attempts.count == 0


def _p384_der_b64() -> str:
    der = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return base64.urlsafe_b64encode(der).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("key", "subject"),
    [
        ("not-a-key", "mailto:ops@tapgate.example"),
        ("p384", "mailto:ops@tapgate.example"),
        (None, "ops at example"),
        (None, "https://"),
    ],
)
async def test_web_push_refuses_to_start_with_a_bad_vapid_key_or_subject(
    client: httpx.AsyncClient, fakes: PushFakes, key: str | None, subject: str
) -> None:
    vapid = {"p384": _p384_der_b64(), None: fakes.accounts.vapid_private_b64}.get(key, key)
    with pytest.raises(ConfigurationError):
        WebPushSender(client, str(vapid), subject, FrozenClock())


# -- APNs ----------------------------------------------------------------------------------------------------


async def test_an_apns_push_carries_a_provider_token_and_the_generic_alert(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    push = message("apns", APNS_TOKEN)
    await sends(apns_sender(client, fakes, clock), push)

    [seen] = fakes.route_seen("apns")  # the fake verified the ES256 token, its kid and iss
    assert seen.path == f"/3/device/{APNS_TOKEN}"
    assert json.loads(seen.body) == {
        "aps": {"alert": {"title": TITLE, "body": BODY}, "sound": "default"},
        "tapgate": {
            "event": "approval.requested",
            "delivery_id": push.delivery_id,
            "device": {"id": "ana-phone", "user_id": "ana"},
            "data": DATA,
        },
    }
    assert seen.headers["apns-id"] == apns_id(push.delivery_id)
    assert jwt_parts(seen.headers["authorization"].split(" ")[1])[1]["iat"] == int(clock.now().timestamp())


def test_the_apns_id_is_a_uuid_fixed_by_the_delivery_id() -> None:
    assert apns_id("dlv_1") == apns_id("dlv_1") != apns_id("dlv_2")
    assert uuid.UUID(apns_id("dlv_1")).version == 5


async def test_the_apns_provider_token_is_kept_for_50_minutes_then_renewed(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    sender = apns_sender(client, fakes, clock)
    await sends(sender, message("apns", APNS_TOKEN))
    clock.advance(50 * 60 - 1)
    await sends(sender, message("apns", APNS_TOKEN))
    clock.advance(1)
    await sends(sender, message("apns", APNS_TOKEN))

    tokens = [s.headers["authorization"] for s in fakes.route_seen("apns")]
    assert tokens[0] == tokens[1] != tokens[2]
    assert jwt_parts(tokens[2].split(" ")[1])[1]["iat"] == int(clock.now().timestamp())


async def test_a_provider_token_apple_calls_expired_is_renewed_and_the_push_sent_once_more(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    sender = apns_sender(client, fakes, clock)
    await sends(sender, message("apns", APNS_TOKEN))
    fakes.apns_expired.add(fakes.route_seen("apns")[0].headers["authorization"].split(" ")[1])
    await sends(sender, message("apns", APNS_TOKEN))

    tokens = [s.headers["authorization"] for s in fakes.route_seen("apns")]
    assert len(tokens) == 3 and tokens[0] == tokens[1] != tokens[2]


@pytest.mark.parametrize(
    ("status", "reason", "gone", "retryable"),
    [
        (410, "Unregistered", True, False),
        (400, "BadDeviceToken", True, False),
        (400, "DeviceTokenNotForTopic", False, False),
        (403, "InvalidProviderToken", False, False),
        (413, "PayloadTooLarge", False, False),
        (429, "TooManyRequests", False, True),
        (500, "InternalServerError", False, True),
        (503, "ServiceUnavailable", False, True),
    ],
)
async def test_apns_answers_say_whether_the_device_token_is_gone_or_worth_a_retry(
    client: httpx.AsyncClient,
    fakes: PushFakes,
    clock: FrozenClock,
    attempts: Attempts,
    status: int,
    reason: str,
    gone: bool,
    retryable: bool,
) -> None:
    fakes.apns_faults[APNS_TOKEN] = (status, reason)
    failure = await fails(apns_sender(client, fakes, clock), message("apns", APNS_TOKEN))
    assert isinstance(failure, SubscriptionGone) is gone
    assert failure.retryable is retryable
    assert reason in failure.message
    assert attempts.count == 1


@pytest.mark.parametrize("token", ["../../../v1/other", "a1" * 20, "z" * 64, APNS_TOKEN + "/x"])
async def test_an_apns_token_that_is_not_hex_is_never_put_in_a_url(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock, attempts: Attempts, token: str
) -> None:
    assert (await fails(apns_sender(client, fakes, clock), message("apns", token))).retryable is False
    assert attempts.count == 0


# -- FCM -----------------------------------------------------------------------------------------------------


async def test_an_fcm_push_is_authorised_by_the_service_account_and_carries_string_data(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    push = message("fcm", "fcm-registration-token")
    await sends(fcm_sender(client, fakes, clock), push)

    [token_request] = fakes.route_seen("fcm-token")  # the fake verified the RS256 assertion
    [seen] = fakes.route_seen("fcm")
    assert token_request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert seen.headers["authorization"] == f"Bearer {fakes.fcm_issued[0]}"
    assert json.loads(seen.body) == {
        "message": {
            "token": "fcm-registration-token",
            "notification": {"title": TITLE, "body": BODY},
            "data": {
                "event": "approval.requested",
                "delivery_id": push.delivery_id,
                "device_id": "ana-phone",
                "user_id": "ana",
                "approval_id": "apr_7f3a",
                "invocation_id": "inv_2c9d",
                "urgent": "true",
            },
            "android": {"priority": "high"},
        }
    }


async def test_the_fcm_access_token_is_kept_until_a_minute_before_it_expires(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    sender = fcm_sender(client, fakes, clock)
    await sends(sender, message("fcm", "t1"))
    clock.advance(3599 - 61)
    await sends(sender, message("fcm", "t2"))
    assert len(fakes.route_seen("fcm-token")) == 1
    clock.advance(1)
    await sends(sender, message("fcm", "t3"))

    assert len(fakes.route_seen("fcm-token")) == 2
    assert [s.headers["authorization"] for s in fakes.route_seen("fcm")] == [
        f"Bearer {fakes.fcm_issued[0]}",
        f"Bearer {fakes.fcm_issued[0]}",
        f"Bearer {fakes.fcm_issued[1]}",
    ]


async def test_an_access_token_fcm_refuses_is_renewed_and_the_push_sent_once_more(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    sender = fcm_sender(client, fakes, clock)
    await sends(sender, message("fcm", "t1"))
    fakes.fcm_revoked.add(fakes.fcm_issued[0])
    await sends(sender, message("fcm", "t1"))

    assert len(fakes.route_seen("fcm-token")) == 2
    assert len(fakes.route_seen("fcm")) == 3


@pytest.mark.parametrize(
    ("fault", "gone", "retryable"),
    [
        (fcm_error(404, "NOT_FOUND", "UNREGISTERED"), True, False),
        (fcm_error(400, "INVALID_ARGUMENT", "UNREGISTERED"), True, False),
        (fcm_error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"), False, False),
        (fcm_error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"), False, False),
        (fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED"), False, True),
        (fcm_error(500, "INTERNAL", "INTERNAL"), False, True),
        (fcm_error(503, "UNAVAILABLE", "UNAVAILABLE"), False, True),
    ],
    ids=["404", "400-unregistered", "400", "403", "429", "500", "503"],
)
async def test_fcm_answers_say_whether_the_token_is_gone_or_worth_a_retry(
    client: httpx.AsyncClient,
    fakes: PushFakes,
    clock: FrozenClock,
    fault: tuple[int, dict[str, Any]],
    gone: bool,
    retryable: bool,
) -> None:
    fakes.fcm_faults["faulty-token"] = fault
    failure = await fails(fcm_sender(client, fakes, clock), message("fcm", "faulty-token"))
    assert isinstance(failure, SubscriptionGone) is gone
    assert failure.retryable is retryable
    assert len(fakes.route_seen("fcm")) == 1


@pytest.mark.parametrize(("status", "retryable"), [(400, False), (401, False), (503, True)])
async def test_a_token_endpoint_failure_stops_the_push_before_fcm(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock, status: int, retryable: bool
) -> None:
    fakes.fcm_token_fault = (status, {"error": "invalid_grant"})
    failure = await fails(fcm_sender(client, fakes, clock), message("fcm", "t1"))
    assert failure.retryable is retryable
    assert fakes.route_seen("fcm") == []


@pytest.mark.parametrize("key", ["event", "device_id", "google.sent_time", "gcm.notification", "from"])
async def test_an_fcm_data_key_that_fcm_or_the_envelope_owns_fails_for_good(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock, attempts: Attempts, key: str
) -> None:
    failure = await fails(fcm_sender(client, fakes, clock), message("fcm", "t1", data={key: "x"}))
    assert failure.retryable is False
    assert attempts.count == 0


async def test_fcm_and_apns_refuse_to_start_with_unusable_credentials(
    client: httpx.AsyncClient, fakes: PushFakes
) -> None:
    for broken in (
        {"private_key": fakes.accounts.fcm_pem},
        {**service_account(fakes), "private_key": "nope"},
    ):
        with pytest.raises(ConfigurationError):
            FcmSender(client, "p", broken, FrozenClock())
    with pytest.raises(ConfigurationError):  # an RSA key where Apple's P-256 .p8 belongs
        ApnsSender(client, "T", "K", fakes.accounts.fcm_pem, "topic", FrozenClock())


# -- the router ----------------------------------------------------------------------------------------------


async def test_the_router_picks_the_sender_for_the_kind_then_the_relay_then_refuses(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    relay = relay_sender(client, fakes, clock, f"{fakes.base_url}/relay/ok")  # serves fcm and mipush
    router = PushRouter(
        {"webpush": webpush_sender(client, fakes, clock), "fcm": fcm_sender(client, fakes, clock)}, relay
    )
    await sends(router, message("webpush", fakes.subscribe("phone").token))
    await sends(router, message("fcm", "fcm-token"))
    await sends(router, message("mipush", "mi-token"))
    failure = await fails(router, message("apns", APNS_TOKEN))

    assert [s.route for s in fakes.seen] == ["webpush", "fcm-token", "fcm", "relay"]
    assert failure.retryable is False
    assert router.serves("mipush") and not router.serves("apns")


async def test_a_sender_refuses_a_message_for_another_kind(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock, attempts: Attempts
) -> None:
    for sender in (webpush_sender(client, fakes, clock), apns_sender(client, fakes, clock)):
        assert (await fails(sender, message("fcm", APNS_TOKEN))).retryable is False
    assert attempts.count == 0


# -- the payload audit (G16) ---------------------------------------------------------------------------------

ENVELOPE = {"event": None, "delivery_id": None, "device": {"id": None, "user_id": None}}
DATA_KEYS = dict.fromkeys(DATA)
ALLOWED_SHAPES = {
    "relay": {
        **ENVELOPE,
        "device": {"id": None, "user_id": None, "push": {"kind": None, "token": None}},
        "ui": {"title": None, "body": None},
        "data": DATA_KEYS,
        "note": None,
    },
    "webpush": {**ENVELOPE, "ui": {"title": None, "body": None}, "data": DATA_KEYS},
    "apns": {
        "aps": {"alert": {"title": None, "body": None}, "sound": None},
        "tapgate": {**ENVELOPE, "data": DATA_KEYS},
    },
    "fcm": {
        "message": {
            "token": None,
            "notification": {"title": None, "body": None},
            "data": {"event": None, "delivery_id": None, "device_id": None, "user_id": None, **DATA_KEYS},
            "android": {"priority": None},
        }
    },
}


async def _send_one_of_each(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> list[PushMessage]:
    pushes = [
        message("fcm", "relay-fcm-token"),
        message("webpush", fakes.subscribe("audit").token),
        message("apns", APNS_TOKEN),
        message("fcm", "fcm-registration-token"),
    ]
    senders = [
        relay_sender(client, fakes, clock, f"{fakes.base_url}/relay/ok"),
        webpush_sender(client, fakes, clock),
        apns_sender(client, fakes, clock),
        fcm_sender(client, fakes, clock),
    ]
    for sender, push in zip(senders, pushes, strict=True):
        await sends(sender, push)
    return pushes


async def test_every_push_carries_the_ids_and_generic_text_and_nothing_else(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock
) -> None:
    pushes = await _send_one_of_each(client, fakes, clock)
    a = fakes.accounts
    subscription = fakes.subscriptions["audit"]
    secrets_ = [
        TENANT_CANARY,
        a.relay_secret,
        a.vapid_private_b64,
        subscription.token.split('"auth": "')[1].split('"')[0],  # the subscription's auth secret
        a.apns_pem.splitlines()[1],
        a.fcm_pem.splitlines()[1],
        a.fcm_email,  # only the token endpoint may learn who is sending
    ]
    for route, push in zip(("relay", "webpush", "apns", "fcm"), pushes, strict=True):
        [seen] = fakes.route_seen(route)
        document = json.loads(seen.plaintext if route == "webpush" else seen.body)
        assert key_tree(document) == ALLOWED_SHAPES[route], route
        sent = seen.plaintext if route == "webpush" else seen.everything()
        for wanted in ("ana-phone", push.delivery_id, "apr_7f3a", "inv_2c9d"):
            assert wanted.encode() in sent, (route, wanted)
        for secret in secrets_:
            assert secret.encode() not in seen.everything(), (route, secret)
        tapgate_headers = {name for name in seen.headers if name.startswith("x-tapgate-")}
        assert tapgate_headers == (
            {EVENT_HEADER, DELIVERY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER} if route == "relay" else set()
        )


async def test_no_log_line_of_a_push_holds_its_text_its_address_or_a_secret(
    client: httpx.AsyncClient, fakes: PushFakes, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await _send_one_of_each(client, fakes, clock)
    await fails(
        relay_sender(client, fakes, clock, f"{fakes.base_url}/relay/500"), message("fcm", "relay-fcm-token")
    )
    fakes.subscribe("gone", status=410)
    await fails(webpush_sender(client, fakes, clock), message("webpush", fakes.subscriptions["gone"].token))

    a = fakes.accounts
    forbidden = [
        TITLE,
        BODY,
        "relay-fcm-token",
        "fcm-registration-token",
        APNS_TOKEN,
        "/webpush/",
        a.relay_secret,
    ]
    forbidden += [a.vapid_private_b64, *fakes.fcm_issued, TENANT_CANARY]
    lines = [json.dumps(r.__dict__, default=str) for r in caplog.records if r.name.startswith("tapgate")]
    assert lines  # the relay's retries were logged
    for line in lines:
        for text in forbidden:
            assert text not in line
