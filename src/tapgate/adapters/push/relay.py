"""The relay sender: a signed POST to the operator's relay for the device's push kind (see tapgate.relay).

Retry policy: a network error, the deadline, a 5xx or a 429 may pass later: PushFailed(retryable=True);
a 3xx (never followed) or another 4xx is final: PushFailed(retryable=False). The gateway's outbox owns
the retries (``push_retry_seconds``: two, so three attempts in all on a network error or a 5xx), durable
across restarts, and builds this sender with no ``backoff`` of its own; a sender used on its own may
retry in place with one. Every attempt carries the same delivery id, so a relay that took an earlier
attempt sees the next as a replay (tapgate.relay tells relays to answer that with a 2xx).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import cast

import anyio
import httpx

from tapgate.adapters.push._wire import canonical_json, post, refused
from tapgate.domain.errors import PushFailed
from tapgate.domain.push import PushMessage
from tapgate.ports import Clock
from tapgate.relay import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

log = logging.getLogger(__name__)

NOTE = "A notification only: nothing can be approved or decided from it."
SERVICE = "The push relay"


class RelaySender:
    """Sends to the relay configured for ``message.target.kind`` (``push_relays`` in the settings)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        relays: Mapping[str, str],
        secret: str,
        clock: Clock,
        *,
        backoff: Sequence[float] = (),
        timeout: float = 10.0,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        """``backoff`` is the wait before each retry in place (its length is the number of retries; none
        by default); ``timeout`` bounds each attempt, the reply's body included."""
        self._client = client
        self._relays = dict(relays)
        self._secret = secret
        self._clock = clock
        self._backoff = tuple(backoff)
        self._timeout = timeout
        self._sleep = sleep

    def serves(self, kind: str) -> bool:
        return kind in self._relays

    @staticmethod
    def body(message: PushMessage) -> bytes:
        """The canonical JSON the relay receives and the signature covers."""
        payload = message.payload()
        device = dict(cast(Mapping[str, object], payload["device"]))
        device["push"] = {"kind": message.target.kind, "token": message.target.token}
        return canonical_json({**payload, "device": device, "note": NOTE})

    async def send(self, message: PushMessage) -> None:
        """Raises PushFailed: not retryable when no relay serves the kind or the relay refused (3xx, 4xx
        but 429); retryable when every attempt met a network error, the deadline or a 5xx, or on a 429."""
        url = self._relays.get(message.target.kind)
        if url is None:
            raise PushFailed(f"No push relay is configured for {message.target.kind!r}.", retryable=False)
        body = self.body(message)
        timestamp = int(self._clock.now().timestamp())
        headers = {
            "content-type": "application/json",
            EVENT_HEADER: message.event,
            DELIVERY_HEADER: message.delivery_id,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(self._secret, timestamp, message.delivery_id, body),
        }
        for attempt, pause in enumerate([*self._backoff, None], start=1):
            try:
                reply = await post(
                    self._client, url, content=body, headers=headers, within=self._timeout, service=SERVICE
                )
            except PushFailed as e:
                failure = e
            else:
                if 200 <= reply.status < 300:
                    return
                failure = refused(SERVICE, reply)
                if reply.status < 500:  # a 429 may pass later, through the outbox, but not at once
                    raise failure
            if not failure.retryable or pause is None:
                raise failure
            log.info(
                "push relay attempt failed; trying again",
                extra={"delivery_id": message.delivery_id, "attempt": attempt, "reason": failure.message},
            )
            await self._sleep(pause)
