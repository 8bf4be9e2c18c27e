"""Invocations: one tool call on one device, answered exactly once.

A row exists from the moment the call is delivered (``pending``) or waits for the person
(``awaiting_approval``); it ends ``done``, ``declined``, ``failed`` or ``expired``. Only a result the
device posts moves it to ``done``. Refused and unavailable calls are answers too, but leave no row.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from tapgate.domain.devices import SMS_SEND, Capability, ParamType
from tapgate.domain.errors import Conflict, InvalidInput
from tapgate.domain.text import unsafe_character

MAX_WAIT_SECONDS = 300  # the longest any caller may be held waiting for a call's answer
MAX_POLL_SECONDS = 60  # the longest a long-poll (a device's work, the inbox) is held

STRING_MAX = 4096
MESSAGE_MAX = 500
OFFLINE = "tool.device_offline"
TRUST = "external_untrusted"


class Status(StrEnum):
    PENDING = "pending"
    AWAITING_APPROVAL = "awaiting_approval"
    DONE = "done"
    DECLINED = "declined"
    FAILED = "failed"
    EXPIRED = "expired"
    REFUSED = "refused"
    UNAVAILABLE = "unavailable"

    @property
    def open(self) -> bool:
        return self in (Status.PENDING, Status.AWAITING_APPROVAL)


OPEN = (Status.PENDING.value, Status.AWAITING_APPROVAL.value)
# Capabilities whose every call puts a card in front of the person (their tap is the confirmation).
# What a device may answer; sent and cancelled are the compose sheet's words for done and declined.
DEVICE_ANSWERS = {
    "done": Status.DONE,
    "sent": Status.DONE,
    "declined": Status.DECLINED,
    "cancelled": Status.DECLINED,
    "failed": Status.FAILED,
}


@dataclass(frozen=True, slots=True)
class Invocation:
    tenant_id: str
    invocation_id: str
    user_id: str
    agent_id: str
    device_uid: str
    device_id: str
    tool: str
    capability: str
    arguments: Mapping[str, Any]
    arguments_sha256: str
    status: Status
    created_at: datetime
    expires_at: datetime
    session_id: str | None = None
    run_id: str | None = None
    origin: str = "owner"
    delivered_at: datetime | None = None
    resolved_at: datetime | None = None
    message: str | None = None  # the device's own words with its result: untrusted
    late_status: str | None = None  # a result that came after expiry, kept as a report
    late_message: str | None = None
    late_at: datetime | None = None
    reason: str | None = None  # why it was refused, or which rule asks the person
    binding_code: str | None = None
    approval_id: str | None = None
    mandate_id: str | None = None  # the standing mandate it went under, without an approval

    def answered(self, status: Status, message: str | None, now: datetime) -> Invocation:
        """The device's answer. Raises Conflict if the invocation is no longer open."""
        if not self.status.open:
            raise Conflict(f"This invocation was answered already: {self.status.value}.")
        if status not in (Status.DONE, Status.DECLINED, Status.FAILED):
            raise InvalidInput("status", "status must be done, declined or failed (or sent, cancelled).")
        return replace(self, status=status, message=cut_message(message), resolved_at=now)

    def refused(self, reason: str, now: datetime) -> Invocation:
        """A call that waited for the person and may not go on. Raises Conflict if it is not open."""
        if not self.status.open:
            raise Conflict(f"This invocation was answered already: {self.status.value}.")
        return replace(self, status=Status.REFUSED, reason=reason, resolved_at=now)

    def expired(self, now: datetime) -> Invocation:
        if not self.status.open:
            raise Conflict(f"This invocation was answered already: {self.status.value}.")
        return replace(self, status=Status.EXPIRED, resolved_at=now)

    def due(self, now: datetime) -> bool:
        return self.status.open and now >= self.expires_at


def device_status(value: str) -> Status:
    """A device's answer word as a status. Raises InvalidInput."""
    status = DEVICE_ANSWERS.get(value)
    if status is None:
        raise InvalidInput("status", "status must be done, declined or failed (or sent, cancelled).")
    return status


def cut_message(message: str | None, limit: int = MESSAGE_MAX) -> str | None:
    if message is None:
        return None
    message = message.strip()[:limit].rstrip()
    return message or None


def arguments_sha256(tool: str, arguments: Mapping[str, Any]) -> str:
    """The identity of a call's input, for idempotent replays (sorted keys, compact JSON)."""
    canonical = json.dumps({"tool": tool, "arguments": arguments}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_arguments(capability: Capability, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments, checked against the capability's params: no unknown keys, required ones present,
    right types, strings bounded and free of hidden characters. Raises InvalidInput naming the field
    (never its value)."""
    params = {p.name: p for p in capability.params}
    for key in arguments:
        if key not in params:
            raise InvalidInput(key, f"{key} is not a parameter of {capability.name}.")
    for param in capability.params:
        if param.name not in arguments:
            if param.required:
                raise InvalidInput(param.name, f"{param.name} is required.")
            continue
        value = arguments[param.name]
        if value is None and not param.required:
            continue
        _check_value(param.name, param.type, param.enum, value)
    return dict(arguments)


def _check_value(name: str, kind: ParamType, enum: tuple[str, ...], value: object) -> None:
    if kind in (ParamType.STRING, ParamType.ENUM):
        if not isinstance(value, str):
            raise InvalidInput(name, f"{name} must be a string.")
        check_string(name, value)
        if enum and value not in enum:
            raise InvalidInput(name, f"{name} must be one of: {', '.join(enum)}.")
    elif kind is ParamType.BOOLEAN:
        if not isinstance(value, bool):
            raise InvalidInput(name, f"{name} must be true or false.")
    elif kind is ParamType.INTEGER:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(name, f"{name} must be a whole number.")
    elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(name, f"{name} must be a number.")


def check_string(name: str, value: str, limit: int = STRING_MAX) -> None:
    """A string argument: bounded, and free of control characters other than newline and tab."""
    if len(value) > limit:
        raise InvalidInput(name, f"{name} is longer than {limit} characters.")
    bad = unsafe_character(value, allow_newlines=True)
    if bad is not None:
        raise InvalidInput(name, f"{name} contains {bad}, a control, format or invisible character.")


def strings_in(value: object, path: str = "") -> list[tuple[str, str]]:
    """Every string inside ``value`` with where it sits, for the checks that read all outbound text."""
    if isinstance(value, str):
        return [(path or "value", value)]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in strings_in(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list | tuple):
        return [s for i, v in enumerate(value) for s in strings_in(v, f"{path}[{i}]")]
    return []


_GENERIC = {
    Status.DONE: "Done: the device did it.",
    Status.DECLINED: "Declined: the person said no on the device. Do not try again unless they ask.",
    Status.FAILED: "device error: the device could not do it.",
}
_SMS = {
    Status.DONE: "Sent: the person tapped Send on the phone.",
    Status.DECLINED: "Not sent: the person closed the message without sending it. Do not try again unless "
    "they ask.",
    Status.FAILED: "device error: the phone could not open the message.",
}
_ANSWERS = {SMS_SEND: _SMS}  # a capability's own texts for the agent, where it has them


def result_text(capability: str, status: Status, message: str | None) -> str:
    """What the agent reads for a device's answer (phone_action has its own texts)."""
    if status is Status.EXPIRED:
        return f"{OFFLINE}: the device did not answer in time; it may be offline."
    base = _ANSWERS.get(capability, _GENERIC)[status]
    if message is None:
        return base
    if status is Status.FAILED:
        return f"device error: {message}"
    return f"{base}\n\nThe device says: {message}"
