"""The FCM sender: Firebase Cloud Messaging's HTTP v1 API, authorised as a service account.

The access token comes from the OAuth2 JWT-bearer flow: a JWT signed RS256 with the service account's key,
POSTed to its ``token_uri``; it is kept until a minute before it expires, and renewed once at once when FCM
answers 401. One attempt per send otherwise: 429, 5xx and network errors come back retryable.
FCM's ``data`` holds strings only: the event, the delivery, the device and the message's ids and flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import anyio
import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tapgate.adapters.push._wire import Reply, canonical_json, check_kind, compact_jwt, post, refused
from tapgate.domain.errors import ConfigurationError, PushFailed, SubscriptionGone
from tapgate.domain.push import PushMessage, PushValue
from tapgate.ports import Clock

KIND = "fcm"
SERVICE = "FCM"
AUTH_SERVICE = "The service account's token endpoint"
ENDPOINT = "https://fcm.googleapis.com"
GOOGLE_OAUTH = "https://oauth2.googleapis.com/token"
SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_LIFETIME_SECONDS = 3600
RENEW_BEFORE_EXPIRY_SECONDS = 60
# FCM refuses these data keys; the first four are the envelope every message carries.
_RESERVED = frozenset(
    {"event", "delivery_id", "device_id", "user_id", "from", "message_type", "collapse_key"}
)


class FcmSender:
    """Sends ``fcm`` messages; ``credentials`` is the service account's JSON key file, parsed."""

    kind = KIND

    def __init__(
        self,
        client: httpx.AsyncClient,
        project_id: str,
        credentials: Mapping[str, Any],
        clock: Clock,
        *,
        endpoint: str = ENDPOINT,
        token_url: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        """``token_url`` defaults to the service account's ``token_uri``. Raises ConfigurationError when
        the credentials lack ``client_email`` or an RSA ``private_key``."""
        self._client = client
        self._project_id = project_id
        self._email = _text(credentials, "client_email")
        self._key = _rsa_key(_text(credentials, "private_key"))
        self._key_id = credentials.get("private_key_id")
        self._token_url = token_url or credentials.get("token_uri") or GOOGLE_OAUTH
        self._clock = clock
        self._endpoint = endpoint.rstrip("/")
        self._timeout = timeout
        self._access: tuple[str, float] | None = None  # the access token and when to stop using it
        self._lock = anyio.Lock()

    def serves(self, kind: str) -> bool:
        return kind == KIND

    @staticmethod
    def body(message: PushMessage) -> dict[str, object]:
        """Raises PushFailed (not retryable) when the message's data uses a key FCM or the envelope owns."""
        data = {
            "event": message.event,
            "delivery_id": message.delivery_id,
            "device_id": message.device_id,
            "user_id": message.user_id,
        }
        for key, value in message.data.items():
            if key in _RESERVED or key.startswith(("google", "gcm")):
                raise PushFailed(f"The push data key {key!r} is reserved in FCM.", retryable=False)
            data[key] = _string(value)
        return {
            "message": {
                "token": message.target.token,
                "notification": {"title": message.title, "body": message.body},
                "data": data,
                "android": {"priority": "high"},
            }
        }

    async def send(self, message: PushMessage) -> None:
        """Raises SubscriptionGone on 404 or UNREGISTERED; PushFailed otherwise: retryable for 429, 5xx and
        network errors (at FCM or the token endpoint), not for a 4xx or refused credentials."""
        check_kind(message, KIND)
        body = canonical_json(self.body(message))
        url = f"{self._endpoint}/v1/projects/{self._project_id}/messages:send"
        rejected: str | None = None
        for _ in range(2):
            token = await self._access_token(rejected)
            reply = await post(
                self._client,
                url,
                content=body,
                headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
                within=self._timeout,
                service=SERVICE,
            )
            if 200 <= reply.status < 300:
                return
            status, codes = _error(reply)
            if reply.status == 401 and rejected is None:
                rejected = token
                continue
            if reply.status == 404 or "UNREGISTERED" in codes:
                raise SubscriptionGone(f"{SERVICE} answered {reply.status} ({status}): the token is gone.")
            raise refused(SERVICE, reply, status)

    async def _access_token(self, rejected: str | None) -> str:
        """The cached token, unless it expires within a minute or is the one FCM just ``rejected``."""
        async with self._lock:
            now = self._clock.now().timestamp()
            if self._access is not None:
                token, until = self._access
                if now < until and token != rejected:
                    return token
            self._access = await self._fetch_token(int(now))
            return self._access[0]

    async def _fetch_token(self, now: int) -> tuple[str, float]:
        assertion = compact_jwt(
            {"alg": "RS256", "typ": "JWT", **({"kid": self._key_id} if self._key_id else {})},
            {
                "iss": self._email,
                "scope": SCOPE,
                "aud": self._token_url,
                "iat": now,
                "exp": now + ASSERTION_LIFETIME_SECONDS,
            },
            lambda data: self._key.sign(data, padding.PKCS1v15(), hashes.SHA256()),
        )
        reply = await post(
            self._client,
            self._token_url,
            content=urlencode({"grant_type": GRANT_TYPE, "assertion": assertion}).encode(),
            headers={"content-type": "application/x-www-form-urlencoded"},
            within=self._timeout,
            service=AUTH_SERVICE,
        )
        if not 200 <= reply.status < 300:
            raise refused(AUTH_SERVICE, reply)
        answer = reply.json()
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise PushFailed(f"{AUTH_SERVICE} answered without an access token.", retryable=True)
        expires_in = answer.get("expires_in") if isinstance(answer, dict) else None
        lifetime = (
            expires_in if isinstance(expires_in, int) and expires_in > 0 else ASSERTION_LIFETIME_SECONDS
        )
        return token, now + min(lifetime, ASSERTION_LIFETIME_SECONDS) - RENEW_BEFORE_EXPIRY_SECONDS


def _string(value: PushValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _error(reply: Reply) -> tuple[str, set[str]]:
    """FCM's error status (``NOT_FOUND``) and the ``errorCode``s of its details (``UNREGISTERED``)."""
    parsed = reply.json()
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return "", set()
    status = error.get("status")
    details = error.get("details")
    codes = {
        d["errorCode"]
        for d in (details if isinstance(details, list) else [])
        if isinstance(d, dict) and isinstance(d.get("errorCode"), str)
    }
    word = (
        status if isinstance(status, str) and status.replace("_", "").isalpha() and len(status) < 40 else ""
    )
    return word, codes


def _text(credentials: Mapping[str, Any], key: str) -> str:
    value = credentials.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"The FCM service account credentials lack {key!r}.")
    return value


def _rsa_key(pem: str) -> rsa.RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as e:
        raise ConfigurationError("The FCM service account's private_key is not a PEM private key.") from e
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ConfigurationError("The FCM service account's private_key must be an RSA key.")
    return key
