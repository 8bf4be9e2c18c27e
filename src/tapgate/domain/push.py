"""Push messages: a content-free wake-up naming a device and the thing waiting for it.

A push is a hint, never the queue: the device fetches everything pending when woken, so a lost,
duplicated, reordered or coalesced push changes nothing. A payload carries ids and generic text only,
never arguments, message text or secrets (gate G16).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tapgate.domain.devices import PushTarget
from tapgate.domain.errors import TapgateError

PushValue = str | int | bool | None


@dataclass(frozen=True, slots=True)
class PushMessage:
    delivery_id: str  # unique per outbox row: relays refuse a delivery id they have seen
    event: str  # invocation.pending, approval.requested, approval.decided, or a notice's event
    tenant_id: str
    user_id: str
    device_id: str
    target: PushTarget
    title: str = "tapgate"
    body: str = "Open tapgate: something is waiting for you."
    data: Mapping[str, PushValue] = field(default_factory=dict)  # ids and flags only

    def payload(self) -> dict[str, object]:
        """What leaves the server: the event, the device, generic text and ids."""
        return {
            "event": self.event,
            "delivery_id": self.delivery_id,
            "device": {"id": self.device_id, "user_id": self.user_id},
            "ui": {"title": self.title, "body": self.body},
            "data": dict(self.data),
        }


class PushFailed(TapgateError):
    code = "push_failed"

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class SubscriptionGone(PushFailed):
    """The push service says the address is dead (Web Push 404/410, APNs 410, FCM UNREGISTERED)."""

    code = "push_subscription_gone"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A push waiting to be sent, written in the transaction of what it announces."""

    tenant_id: str
    delivery_id: str
    device_uid: str
    event: str
    subject_id: str  # the invocation or approval it announces
    not_before: datetime  # live links get the first second (configurable) before a push goes out
    created_at: datetime
    status: str = "queued"  # queued, sent, skipped, failed
    attempts: int = 0
    claimed_until: datetime | None = None
    finished_at: datetime | None = None
