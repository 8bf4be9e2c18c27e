"""Events: what the agent runtime learns from the event stream, durable and resumable by sequence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

EventValue = str | int | bool | None

INVOCATION_RESOLVED = "invocation.resolved"
INVOCATION_LATE_REPORT = "invocation.late_report"
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_DECIDED = "approval.decided"
INGEST_MESSAGE = "ingest.message"
# The agent's tool list may have changed (a grant, a device, its capabilities, a session's phone): ids
# and a fixed word for what changed, never any text, so a runtime knows to list its tools again.
TOOLS_CHANGED = "tools.changed"
AGENTS_PAUSED = "agents.paused"  # the person paused every agent from the console
AGENTS_RESUMED = "agents.resumed"
# A device's life, as the agent may want to know it: each carries the device id only.
DEVICE_PAIRED = "device.paired"
DEVICE_REVOKED = "device.revoked"
DEVICE_ONLINE = "device.online"
DEVICE_OFFLINE = "device.offline"
DEVICE_CAPABILITIES_CHANGED = "device.capabilities_changed"


@dataclass(frozen=True, slots=True)
class Event:
    tenant_id: str
    seq: int
    user_id: str
    type: str
    data: Mapping[str, EventValue]
    created_at: datetime
