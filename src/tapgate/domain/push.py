"""Push messages: a content-free wake-up naming a device and the thing waiting for it.

A push is a hint, never the queue: the device fetches everything pending when woken, so a lost,
duplicated, reordered or coalesced push changes nothing. A payload carries ids and generic text only,
never arguments, message text or secrets (gate G16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from tapgate.domain.devices import PushTarget
from tapgate.domain.events import APPROVAL_REQUESTED

PushValue = str | int | float | bool | None

INVOCATION_PENDING = "invocation.pending"
DEVICE_PAIRED = "device.paired"  # a new device joined the person's account
GENERIC_TITLE = "tapgate"
GENERIC_BODY = "Open tapgate: something is waiting for you."
# What each wake-up says when the person's own words are not shown: generic, never the content.
GENERIC_BODIES: Mapping[str, str] = {
    INVOCATION_PENDING: "Open tapgate: a request is waiting for your device.",
    APPROVAL_REQUESTED: "Open tapgate: a request is waiting for your answer.",
    DEVICE_PAIRED: "Open tapgate: a new device was paired with your account.",
    "goal.blocked": "Open tapgate: a goal is waiting for you.",
    "goal.done": "Open tapgate: a goal is done.",
    "memory.proposed": "Open tapgate: something to remember is waiting for your review.",
    "suggestion.proposed": "Open tapgate: a suggestion is waiting for your review.",
    "run.finished": "Open tapgate: a run has finished.",
    "run.failed": "Open tapgate: a run has failed.",
}


@dataclass(frozen=True, slots=True)
class PushMessage:
    delivery_id: str  # unique per outbox row: relays refuse a delivery id they have seen
    event: str  # invocation.pending, approval.requested, approval.decided, or a notice's event
    tenant_id: str
    user_id: str
    device_id: str
    target: PushTarget
    title: str = GENERIC_TITLE
    body: str = GENERIC_BODY
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


class OutboxStatus(StrEnum):
    QUEUED = "queued"  # waiting for its not_before, or claimed by a worker that is sending it
    SENT = "sent"
    SKIPPED = "skipped"  # by its moment, what it announced was fetched, answered or decided, or no target
    COALESCED = "coalesced"  # another push to the same device carried this wake-up
    CAPPED = "capped"  # the person had their pushes for the window (no push fatigue)
    FAILED = "failed"  # every attempt failed, or the push service refused it for good
    HELD = "held"  # a notice for a device with no push target: kept for its live link, never pushed
    LINKED = "linked"  # the device's live link carried the notice: no push needed


KEPT = frozenset({OutboxStatus.QUEUED, OutboxStatus.HELD})  # rows that keep a notice's payload


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A push waiting to be sent, written in the transaction of what it announces."""

    tenant_id: str
    delivery_id: str
    device_uid: str
    user_id: str
    event: str
    subject_id: str  # the invocation, approval or notice it announces
    not_before: datetime  # live links get the first second (configurable) before a push goes out
    created_at: datetime
    status: OutboxStatus = OutboxStatus.QUEUED
    attempts: int = 0
    claimed_until: datetime | None = None  # a worker is sending it; the claim lapses then
    finished_at: datetime | None = None
    pushed_at: datetime | None = None  # when the attempt in flight, or the one that was sent, went out
    data: Mapping[str, PushValue] = field(default_factory=dict)  # a notice's ids and flags
    title: str | None = None  # a notice's own words, only with notice_text on, dropped once finished
    body: str | None = None
    last_error: str | None = None  # the sender's sentence: a service and a status, never an address

    def message(self, device_id: str, target: PushTarget) -> PushMessage:
        """The content-free push for this row: ids in data, generic words unless the notice has its own."""
        ids: dict[str, PushValue]
        if self.event == INVOCATION_PENDING:
            ids = {"invocation_id": self.subject_id}
        elif self.event == APPROVAL_REQUESTED:
            ids = {"approval_id": self.subject_id}
        elif self.event == DEVICE_PAIRED:
            ids = {"paired_device_id": self.subject_id}
        else:
            ids = {**self.data, "notice_id": self.subject_id}
        return PushMessage(
            delivery_id=self.delivery_id,
            event=self.event,
            tenant_id=self.tenant_id,
            user_id=self.user_id,
            device_id=device_id,
            target=target,
            title=self.title or GENERIC_TITLE,
            body=self.body or GENERIC_BODIES.get(self.event, GENERIC_BODY),
            data=ids,
        )


def retry_at(attempts: int, backoff: Sequence[float], now: datetime) -> datetime | None:
    """When to try a row again after its ``attempts``-th attempt failed and may pass later; None when
    ``backoff`` (the wait before each retry: its length is the number of retries) is used up."""
    if attempts > len(backoff):
        return None
    return now + timedelta(seconds=backoff[attempts - 1])


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do with the rows a worker claimed (see :func:`plan_pushes`)."""

    send: tuple[OutboxItem, ...] = ()
    coalesced: tuple[OutboxItem, ...] = ()
    capped: tuple[OutboxItem, ...] = ()
    deferred: tuple[tuple[OutboxItem, datetime], ...] = ()


def plan_pushes(
    due: Sequence[OutboxItem],
    now: datetime,
    pushed_in_window: Mapping[str, int],
    last_pushed: Mapping[str, datetime | None],
    cap: int,
    coalesce_seconds: float,
) -> Plan:
    """Decide the claimed rows that still announce something.

    Rows for one device and event become one push (the oldest row carries it; the device fetches
    everything anyway). A device pushed less than ``coalesce_seconds`` ago waits out the rest of that
    pause, so a burst of calls becomes one push at its end. A user who had ``cap`` pushes in the window
    (``pushed_in_window``, by user id) gets no more: the rest are capped.
    """
    groups: dict[tuple[str, str], list[OutboxItem]] = {}
    for item in sorted(due, key=lambda i: (i.not_before, i.created_at, i.delivery_id)):
        groups.setdefault((item.device_uid, item.event), []).append(item)
    send: list[OutboxItem] = []
    coalesced: list[OutboxItem] = []
    capped: list[OutboxItem] = []
    deferred: list[tuple[OutboxItem, datetime]] = []
    pushed = dict(pushed_in_window)
    pause = timedelta(seconds=coalesce_seconds)
    for (device_uid, _), items in groups.items():
        last = last_pushed.get(device_uid)
        if last is not None and now < last + pause:
            deferred.extend((item, last + pause) for item in items)
            continue
        first, *rest = items
        coalesced.extend(rest)
        if pushed.get(first.user_id, 0) >= cap:
            capped.append(first)
            continue
        pushed[first.user_id] = pushed.get(first.user_id, 0) + 1
        send.append(first)
    return Plan(tuple(send), tuple(coalesced), tuple(capped), tuple(deferred))
