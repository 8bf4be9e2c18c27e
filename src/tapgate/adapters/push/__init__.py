"""Push senders, one per service, and the router that picks one by the device's push kind.

    PushRouter ── webpush ─> WebPushSender   (VAPID, RFC 8291)
               ├─ apns ────> ApnsSender      (token auth, HTTP/2)
               ├─ fcm ─────> FcmSender       (HTTP v1, service account)
               └─ any other kind with a relay ─> RelaySender (HMAC-signed POST, see tapgate.relay)

Each takes an injected httpx.AsyncClient, never follows a redirect, and raises only PushFailed or
SubscriptionGone. Retries belong to the outbox (tapgate.services.outbox), which reads ``retryable``
(APNs and FCM resend once at once, with a renewed auth token, when theirs is refused; the relay sender
can retry in place when built with a ``backoff``, which the gateway does not use).
"""

from __future__ import annotations

from collections.abc import Mapping

from tapgate.adapters.push.apns import ApnsSender
from tapgate.adapters.push.fcm import FcmSender
from tapgate.adapters.push.relay import RelaySender
from tapgate.adapters.push.webpush import WebPushSender
from tapgate.domain.errors import PushFailed
from tapgate.domain.push import PushMessage
from tapgate.ports import PushSender

__all__ = ["ApnsSender", "FcmSender", "PushRouter", "RelaySender", "WebPushSender"]


class PushRouter:
    """Sends each message through the sender for its push kind, else the relay for that kind."""

    def __init__(self, senders: Mapping[str, PushSender], relay: RelaySender | None = None) -> None:
        self._senders = dict(senders)
        self._relay = relay

    def serves(self, kind: str) -> bool:
        return kind in self._senders or (self._relay is not None and self._relay.serves(kind))

    async def send(self, message: PushMessage) -> None:
        """Raises PushFailed (not retryable) when nothing serves the kind; else what the sender raises."""
        kind = message.target.kind
        sender = self._senders.get(kind)
        if sender is None and self._relay is not None and self._relay.serves(kind):
            sender = self._relay
        if sender is None:
            raise PushFailed(f"No push sender or relay serves {kind!r}.", retryable=False)
        await sender.send(message)
