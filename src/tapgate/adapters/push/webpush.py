"""The Web Push sender: the payload encrypted to the browser's subscription (RFC 8291, aes128gcm) and
signed for with VAPID (RFC 8292), POSTed to the subscription's endpoint.

pywebpush encrypts and py_vapid signs; the request goes through the injected httpx client like every
other sender's. The device's push token is the subscription as the browser gives it:
``{"endpoint": "https://…", "keys": {"p256dh": "…", "auth": "…"}}``. One attempt per send: 429, 5xx and
network errors come back as PushFailed(retryable=True) for the outbox to try later.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from http_ece import ECEException  # type: ignore[import-untyped]
from py_vapid import Vapid02, VapidException  # type: ignore[import-untyped]

from tapgate.adapters.push._wire import canonical_json, check_kind, post, refused
from tapgate.domain.errors import ConfigurationError, PushFailed, SubscriptionGone
from tapgate.domain.push import PushMessage
from tapgate.ports import Clock

# The browsers' push services: Chrome and Edge's Chromium (FCM), Firefox (Mozilla autopush), Safari
# (Apple), Edge's legacy and Windows (WNS). Settable as webpush.hosts.
DEFAULT_HOSTS: tuple[str, ...] = (
    "fcm.googleapis.com",
    "android.googleapis.com",
    "updates.push.services.mozilla.com",
    "web.push.apple.com",
    ".notify.windows.com",
)


def push_host_allowed(host: str, hosts: Sequence[str]) -> bool:
    """Whether ``host`` is one of ``hosts`` (an entry starting with '.' also admits its subdomains)."""
    host = host.lower().rstrip(".")
    return any(host == h or (h.startswith(".") and host.endswith(h)) for h in hosts)


KIND = "webpush"
SERVICE = "The Web Push service"
VAPID_LIFETIME_SECONDS = 12 * 3600  # RFC 8292 allows at most 24 hours


class WebPushSender:
    """Sends ``webpush`` messages. ``vapid_private_key`` is base64url DER PKCS#8 of a P-256 key, as
    ``tapgate init`` writes it; ``subject`` a ``mailto:`` or ``https:`` contact for the push services."""

    kind = KIND

    def __init__(
        self,
        client: httpx.AsyncClient,
        vapid_private_key: str,
        subject: str,
        clock: Clock,
        *,
        ttl: int = 3600,
        timeout: float = 10.0,
        https_only: bool = True,
        hosts: Sequence[str] = DEFAULT_HOSTS,
    ) -> None:
        """``ttl`` is how long the push service keeps a push for a browser that is away; ``https_only``
        refuses endpoints that are not https (turned off only to test against loopback); ``hosts`` are
        the push services an endpoint may name (an entry starting with '.' admits its subdomains), so a
        subscription cannot make the gateway post anywhere else.

        Raises ConfigurationError for a key that is not a P-256 private key or an unusable subject."""
        self._client = client
        self._vapid = Vapid02(private_key=_vapid_key(vapid_private_key))
        self._subject = subject
        self._clock = clock
        self._ttl = ttl
        self._timeout = timeout
        self._https_only = https_only
        self._hosts = tuple(h.lower() for h in hosts)
        try:
            self._vapid.sign({"sub": subject, "aud": "https://push.example", "exp": 1})
        except VapidException as e:
            raise ConfigurationError(
                "webpush.subject must be a mailto: address or an https: URL to reach the operator."
            ) from e

    def serves(self, kind: str) -> bool:
        return kind == KIND

    @property
    def public_key(self) -> str:
        """The application server key a browser subscribes with (base64url, uncompressed point)."""
        point = self._vapid.public_key.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return base64.urlsafe_b64encode(point).rstrip(b"=").decode()

    async def send(self, message: PushMessage) -> None:
        """Raises SubscriptionGone when the push service answers 404 or 410; PushFailed otherwise:
        retryable for 429, 5xx and network errors, not for an unusable subscription or another 4xx."""
        check_kind(message, KIND)
        subscription, origin = self._subscription(message.target.token)
        # Loaded at the first send: pywebpush brings aiohttp and requests, about 5 MiB in every process.
        from pywebpush import WebPusher, WebPushException  # type: ignore[import-untyped]

        try:
            encrypted = WebPusher(subscription).encode(canonical_json(message.payload()), "aes128gcm")
        except (WebPushException, ECEException, ValueError) as e:
            raise PushFailed("The Web Push subscription's keys are not usable.", retryable=False) from e
        # A fresh claims dict per send: the library must never see one it filled before.
        claims = {
            "sub": self._subject,
            "aud": origin,
            "exp": int(self._clock.now().timestamp()) + VAPID_LIFETIME_SECONDS,
        }
        try:
            authorization = self._vapid.sign(claims)["Authorization"]
        except VapidException as e:
            raise PushFailed("The Web Push endpoint's origin cannot be signed for.", retryable=False) from e
        headers = {
            "authorization": authorization,
            "content-encoding": "aes128gcm",
            "content-type": "application/octet-stream",
            "ttl": str(self._ttl),
            "urgency": "high",
        }
        reply = await post(
            self._client,
            subscription["endpoint"],
            content=bytes(encrypted["body"]),
            headers=headers,
            within=self._timeout,
            service=SERVICE,
        )
        if 200 <= reply.status < 300:
            return
        if reply.status in (404, 410):
            raise SubscriptionGone(f"{SERVICE} answered {reply.status}: the subscription is gone.")
        raise refused(SERVICE, reply)

    def _subscription(self, token: str) -> tuple[dict[str, Any], str]:
        """The subscription and its endpoint's origin. Raises PushFailed (not retryable) when unusable."""
        unusable = PushFailed("The device's Web Push subscription is not usable.", retryable=False)
        try:
            subscription = json.loads(token)
        except ValueError:
            raise unusable from None
        if not isinstance(subscription, dict):
            raise unusable
        endpoint, keys = subscription.get("endpoint"), subscription.get("keys")
        if not isinstance(endpoint, str) or not isinstance(keys, dict):
            raise unusable
        p256dh, auth = _unb64url(keys.get("p256dh")), _unb64url(keys.get("auth"))
        # RFC 8291: an uncompressed P-256 point and a 16-octet authentication secret
        if len(p256dh) != 65 or p256dh[0] != 4 or len(auth) != 16:
            raise unusable
        try:
            parts = urlsplit(endpoint)
            port = parts.port
        except ValueError:
            raise unusable from None
        allowed = ("https",) if self._https_only else ("https", "http")
        if parts.scheme not in allowed or not parts.hostname:
            raise unusable
        if not push_host_allowed(parts.hostname, self._hosts):
            raise PushFailed("The Web Push endpoint is not on a known push service.", retryable=False)
        origin = f"{parts.scheme}://{parts.hostname}" + (f":{port}" if port is not None else "")
        return {"endpoint": endpoint, "keys": {"p256dh": keys["p256dh"], "auth": keys["auth"]}}, origin


def _unb64url(value: object) -> bytes:
    """Base64url (padded or not) decoded strictly; empty for anything else."""
    if not isinstance(value, str):
        return b""
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except ValueError:
        return b""


def _vapid_key(encoded: str) -> ec.EllipticCurvePrivateKey:
    try:
        der = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        key = serialization.load_der_private_key(der, password=None)
    except (ValueError, TypeError) as e:
        raise ConfigurationError(
            "webpush.vapid_private_key must be base64url DER PKCS#8 of a P-256 key (tapgate init writes one)."
        ) from e
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ConfigurationError("webpush.vapid_private_key must be a P-256 (prime256v1) key.")
    return key


def application_server_key(vapid_private_key: str) -> str:
    """The key a browser subscribes with (base64url of the uncompressed P-256 point) for the operator's
    ``vapid_private_key`` (base64url DER PKCS#8). Raises ConfigurationError for a key that is not one."""
    point = (
        _vapid_key(vapid_private_key)
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return base64.urlsafe_b64encode(point).rstrip(b"=").decode()
