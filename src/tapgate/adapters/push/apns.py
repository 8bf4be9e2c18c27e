"""The APNs sender: an alert to an iPhone through Apple's push service, with token-based authentication.

The provider token is a JWT signed ES256 with the team's .p8 key, kept for 50 minutes (Apple refuses one
older than an hour, and throttles renewals more often than every 20 minutes). Production uses HTTP/2
(an httpx client made with ``http2=True``, which needs the ``h2`` package); the sender works with any
client it is given. One attempt per send, except that a token Apple calls expired is renewed and the push
sent once more; 429, 5xx and network errors come back retryable for the outbox.

``apns-id`` is a UUID derived from the delivery id, so Apple's delivery log and tapgate's outbox name a
push alike and every attempt of one delivery has the same id.
"""

from __future__ import annotations

import re
import uuid

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from tapgate.adapters.push._wire import Reply, canonical_json, check_kind, compact_jwt, post, refused
from tapgate.domain.errors import ConfigurationError, PushFailed, SubscriptionGone
from tapgate.domain.push import PushMessage
from tapgate.ports import Clock

KIND = "apns"
SERVICE = "APNs"
PRODUCTION = "https://api.push.apple.com"
SANDBOX = "https://api.sandbox.push.apple.com"
TOKEN_LIFETIME_SECONDS = 50 * 60
_DEVICE_TOKEN = re.compile(r"[0-9a-fA-F]{64,200}")
_REASON = re.compile(r"[A-Za-z]{1,40}")
_GONE = frozenset({"BadDeviceToken", "Unregistered", "ExpiredToken"})
_DELIVERIES = uuid.uuid5(uuid.NAMESPACE_URL, "urn:tapgate:push-delivery")


def apns_id(delivery_id: str) -> str:
    """The ``apns-id`` of a delivery: the same for every attempt of it."""
    return str(uuid.uuid5(_DELIVERIES, delivery_id))


class ApnsSender:
    """Sends ``apns`` messages; the device's push token is its APNs device token (hex)."""

    kind = KIND

    def __init__(
        self,
        client: httpx.AsyncClient,
        team_id: str,
        key_id: str,
        private_key_pem: str | bytes,
        topic: str,
        clock: Clock,
        *,
        endpoint: str = PRODUCTION,
        timeout: float = 10.0,
    ) -> None:
        """``topic`` is the app's bundle id. Raises ConfigurationError unless the key is a P-256 key."""
        self._client = client
        self._team_id = team_id
        self._key_id = key_id
        self._key = _signing_key(private_key_pem)
        self._topic = topic
        self._clock = clock
        self._endpoint = endpoint.rstrip("/")
        self._timeout = timeout
        self._token: tuple[str, float] | None = None  # the provider token and when it was made

    def serves(self, kind: str) -> bool:
        return kind == KIND

    @staticmethod
    def body(message: PushMessage) -> dict[str, object]:
        """The alert shows the generic text; ``tapgate`` carries the event, the device and the ids."""
        payload = message.payload()
        return {
            "aps": {"alert": {"title": message.title, "body": message.body}, "sound": "default"},
            "tapgate": {key: value for key, value in payload.items() if key != "ui"},
        }

    async def send(self, message: PushMessage) -> None:
        """Raises SubscriptionGone on 410 or a dead device token (400 BadDeviceToken); PushFailed
        otherwise: retryable for 429, 5xx and network errors, not for a malformed token or another 4xx."""
        check_kind(message, KIND)
        device_token = message.target.token
        if not _DEVICE_TOKEN.fullmatch(device_token):
            raise PushFailed("The device's APNs token is not a hex device token.", retryable=False)
        body = canonical_json(self.body(message))
        for renewed in (False, True):
            headers = {
                "authorization": f"bearer {self._provider_token(renew=renewed)}",
                "apns-topic": self._topic,
                "apns-push-type": "alert",
                "apns-priority": "10",
                "apns-id": apns_id(message.delivery_id),
                "content-type": "application/json",
            }
            reply = await post(
                self._client,
                f"{self._endpoint}/3/device/{device_token}",
                content=body,
                headers=headers,
                within=self._timeout,
                service=SERVICE,
            )
            if 200 <= reply.status < 300:
                return
            reason = _reason(reply)
            if reply.status == 403 and reason == "ExpiredProviderToken" and not renewed:
                continue
            if reply.status == 410 or (reply.status == 400 and reason in _GONE):
                raise SubscriptionGone(
                    f"{SERVICE} answered {reply.status} ({reason}): the device token is gone."
                )
            raise refused(SERVICE, reply, reason)

    def _provider_token(self, renew: bool) -> str:
        now = self._clock.now().timestamp()
        if self._token is not None and not renew:
            token, made = self._token
            if made <= now < made + TOKEN_LIFETIME_SECONDS:
                return token
        issued = int(now)
        token = compact_jwt(
            {"alg": "ES256", "kid": self._key_id},
            {"iss": self._team_id, "iat": issued},
            self._sign,
        )
        self._token = (token, issued)
        return token

    def _sign(self, data: bytes) -> bytes:
        r, s = decode_dss_signature(self._key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def _reason(reply: Reply) -> str:
    """Apple's ``reason``, when it is a plain word."""
    parsed = reply.json()
    reason = parsed.get("reason") if isinstance(parsed, dict) else None
    return reason if isinstance(reason, str) and _REASON.fullmatch(reason) else ""


def _signing_key(pem: str | bytes) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(pem.encode() if isinstance(pem, str) else pem, password=None)
    except (ValueError, TypeError) as e:
        raise ConfigurationError("The APNs key must be the PEM (.p8) key Apple issued.") from e
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ConfigurationError("The APNs key must be a P-256 key (Apple's .p8).")
    return key
