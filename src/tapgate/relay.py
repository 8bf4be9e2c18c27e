"""Signing and verifying a relay message: what a push relay calls before it turns one into a platform push.

tapgate POSTs each wake-up for a push kind (``fcm``, ``mipush``…) to the operator's relay URL for that
kind. The body is canonical JSON (sorted keys, no spaces) naming the device, its push address, generic
text and ids, never anything to approve or decide with::

    {"event": "approval.requested", "delivery_id": "dlv_…",
     "device": {"id": "ana-phone", "user_id": "ana", "push": {"kind": "fcm", "token": "…"}},
     "ui": {"title": "tapgate", "body": "Open tapgate: something is waiting for you."},
     "data": {"approval_id": "apr_…"}, "note": "A notification only: …"}

and four headers: ``x-tapgate-event``, ``x-tapgate-delivery`` (unique per message), ``x-tapgate-timestamp``
(Unix seconds) and ``x-tapgate-signature: sha256=<hex HMAC-SHA256 of timestamp + "." + delivery + "." +
body>``, keyed with the ``relay_secret`` setting. A relay in Python verifies it like this::

    from tapgate.relay import DeliveryCache, RelayVerificationError, verify

    seen = DeliveryCache()  # one per process; remembers delivery ids until their timestamps go stale

    async def push(request):  # Starlette here; any framework's headers and raw body will do
        try:
            message = verify(request.headers, await request.body(), RELAY_SECRET, seen=seen)
        except RelayVerificationError as e:  # a tapgate retry of a delivered message is "replayed"
            return Response(status_code=200 if e.reason == "replayed" else 401)
        await send_to_platform(message["device"]["push"]["token"], message["ui"])
        return Response(status_code=202)

Answer 2xx once the push is handed on (any body), 5xx or a dropped connection to have tapgate try again
(it tries three times), 4xx to refuse for good. tapgate never follows a redirect.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from tapgate.domain.errors import RelayVerificationError

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "TOLERANCE_SECONDS",
    "DeliveryCache",
    "RelayVerificationError",
    "sign",
    "verify",
]

EVENT_HEADER = "x-tapgate-event"
DELIVERY_HEADER = "x-tapgate-delivery"
TIMESTAMP_HEADER = "x-tapgate-timestamp"
SIGNATURE_HEADER = "x-tapgate-signature"
TOLERANCE_SECONDS = 300
_PREFIX = "sha256="
_MAX_DIGITS = 12


class DeliveryCache:
    """The delivery ids seen lately, each kept until its timestamp is too old to pass anyway.

    Bounded: past ``max_entries`` the oldest entry is forgotten. Safe to share between threads.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        self._max = max_entries
        self._until: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._until)

    def add(self, delivery_id: str, until: float, now: float) -> bool:
        """Remember ``delivery_id`` until ``until``; False if it was already remembered."""
        with self._lock:
            self._forget_expired(now)
            if delivery_id in self._until:
                return False
            self._until[delivery_id] = until
            while len(self._until) > self._max:
                self._until.popitem(last=False)
            return True

    def _forget_expired(self, now: float) -> None:
        # Entries arrive roughly in timestamp order, so the expired ones gather at the front.
        while self._until:
            oldest, until = next(iter(self._until.items()))
            if until >= now:
                return
            del self._until[oldest]


def sign(secret: str, timestamp: int, delivery_id: str, body: bytes) -> str:
    """The ``x-tapgate-signature`` value for a message."""
    signed = f"{timestamp}.{delivery_id}.".encode() + body
    return _PREFIX + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def verify(
    headers: Mapping[str, str],
    body: bytes,
    secret: str,
    now: float | None = None,
    seen: DeliveryCache | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> dict[str, Any]:
    """Check a relay message and return its parsed body.

    Raises RelayVerificationError when a header is missing, the signature does not match (compared in
    constant time), the timestamp is more than ``tolerance`` seconds off ``now``, ``seen`` already holds
    the delivery id, or the body is not the JSON object the headers describe. A refused message is not
    remembered, so only a verified message can make a later one a replay.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    try:
        event = lowered[EVENT_HEADER]
        delivery_id = lowered[DELIVERY_HEADER]
        stamp = lowered[TIMESTAMP_HEADER]
        signature = lowered[SIGNATURE_HEADER]
    except KeyError:
        raise RelayVerificationError("missing_header") from None
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= _MAX_DIGITS):
        raise RelayVerificationError("bad_timestamp")
    if not delivery_id:
        raise RelayVerificationError("missing_header")
    timestamp = int(stamp)
    expected = sign(secret, timestamp, delivery_id, body)
    if not hmac.compare_digest(expected.encode(), signature.strip().encode("utf-8", "replace")):
        raise RelayVerificationError("bad_signature")
    at = time.time() if now is None else now
    if timestamp < at - tolerance:
        raise RelayVerificationError("stale")
    if timestamp > at + tolerance:
        raise RelayVerificationError("future")
    try:
        message = json.loads(body)
    except ValueError:
        raise RelayVerificationError("bad_body") from None
    if (
        not isinstance(message, dict)
        or message.get("delivery_id") != delivery_id
        or message.get("event") != event
    ):
        raise RelayVerificationError("bad_body")
    if seen is not None and not seen.add(delivery_id, until=timestamp + tolerance, now=at):
        raise RelayVerificationError("replayed")
    return message
