"""The device link's JSON frames: untrusted text in, a frame or nothing out; frames for the device out.

Device → server: ``device:auth`` {deviceId, token}; ``device:result`` {callId, status, message?} (the
``ok: true|false`` with ``result``/``error`` form is read as done/failed); ``device:event`` {capability,
data}. Server → device: ``device:invoke`` (with the call's ``binding_code`` when it was approved first, so
the card repeats the code the agent sees), ``device:approval`` {approval} (the inbox item, live),
``device:ack`` {callId, status} (what became of a ``device:result``), ``device:notice`` {notice} (an
agent's heads-up: ids and flags, the agent's words only where ``notice_text`` is on; it asks nothing back),
``device:revoked``. Anything else is dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tapgate.domain.inbox import Approval
from tapgate.domain.invocations import Invocation
from tapgate.domain.push import OutboxItem

MAX_FRAME = 64 * 1024


@dataclass(frozen=True, slots=True)
class DeviceAuth:
    device_id: str
    token: str


@dataclass(frozen=True, slots=True)
class DeviceResult:
    call_id: str
    status: str
    message: str | None


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    capability: str
    data: Any


Frame = DeviceAuth | DeviceResult | DeviceEvent


def _text(value: object, limit: int) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def parse_frame(raw: str | bytes) -> Frame | None:
    """Read one frame; None for anything malformed (the link drops it and counts it)."""
    if len(raw) > MAX_FRAME:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    if kind == "device:auth":
        device_id, token = _text(data.get("deviceId"), 24), _text(data.get("token"), 200)
        return DeviceAuth(device_id, token) if device_id and token else None
    if kind == "device:result":
        return _result(data)
    if kind == "device:event":
        capability = _text(data.get("capability"), 30)
        return DeviceEvent(capability, data.get("data")) if capability else None
    return None


def _result(data: dict[str, Any]) -> DeviceResult | None:
    call_id = _text(data.get("callId"), 64)
    if call_id is None:
        return None
    message: Any = data.get("message")
    status: Any
    if "ok" in data:  # the older form: ok with result or error
        if not isinstance(data["ok"], bool):
            return None
        status = "done" if data["ok"] else "failed"
        message = data.get("result") if data["ok"] else data.get("error")
        if message is not None and not isinstance(message, str):
            message = json.dumps(message)[:1000]
    else:
        status = data.get("status")
        if not isinstance(status, str):
            return None
    if message is not None and not isinstance(message, str):
        return None
    return DeviceResult(call_id, status, message)


def summary_of(invocation: Invocation) -> str | None:
    """The one-line summary a ``phone_actions`` call carries for its card; None for any other call."""
    summary = invocation.arguments.get("summary") if invocation.capability == "phone_actions" else None
    return summary if isinstance(summary, str) else None


def invoke_frame(invocation: Invocation, summary: str | None = None) -> dict[str, Any]:
    return {
        "type": "device:invoke",
        "callId": invocation.invocation_id,
        "tool": invocation.tool,
        "capability": invocation.capability,
        "input": dict(invocation.arguments),
        "summary": summary if summary is not None else summary_of(invocation),
        "expires_at": invocation.expires_at.isoformat(),
        "binding_code": invocation.binding_code,
    }


def approval_item(approval: Approval) -> dict[str, Any]:
    """An approval as the device reads it: the inbox item of ``GET /v1/inbox``, and what it signs."""
    return {
        "id": approval.approval_id,
        "kind": approval.kind,
        "subject": approval.subject,
        "prompt": approval.prompt,
        "preview": dict(approval.preview),
        "sign": approval.sign.as_json(),
        "binding_code": approval.binding_code,
        "created_at": approval.created_at.isoformat(),
        "expires_at": approval.expires_at.isoformat(),
        "tool": approval.tool,
        "arguments": dict(approval.arguments or {}),
        "agent_asks": approval.agent_asks,
    }


def approval_frame(approval: Approval) -> dict[str, Any]:
    return {"type": "device:approval", "approval": approval_item(approval)}


def notice_frame(item: OutboxItem) -> dict[str, Any]:
    """A notice as its outbox row for the device holds it: the same ids, flags and words a push carries."""
    return {
        "type": "device:notice",
        "notice": {
            "id": item.subject_id,
            "event": item.event,
            "title": item.title,
            "body": item.body,
            "data": dict(item.data),
            "createdAt": item.created_at.isoformat(),
        },
    }


class Ack(StrEnum):
    """What became of a ``device:result``: the words of ``device:ack``'s ``status``."""

    ACCEPTED = "accepted"  # taken: the call is answered
    DUPLICATE = "duplicate"  # answered already; the first answer stands (``first`` says which)
    EXPIRED = "expired"  # too late: kept as a late report
    UNKNOWN = "unknown"  # not this device's call, or no such call
    INVALID = "invalid"  # a status that is not one of the answer words


def ack_frame(
    call_id: str, status: Ack, message: str | None = None, first: str | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "device:ack", "callId": call_id, "status": status.value}
    if message is not None:
        frame["message"] = message
    if first is not None:
        frame["first"] = first
    return frame


REVOKED_FRAME = {"type": "device:revoked"}
