"""Domain objects as the API shows them."""

from __future__ import annotations

from typing import Any

from tapgate.api.schemas import CapabilityView, DeviceView, PushView, SessionView
from tapgate.domain.devices import Device
from tapgate.domain.invocations import Invocation
from tapgate.domain.sessions import Session


def device_view(device: Device) -> DeviceView:
    return DeviceView(
        device_id=device.device_id,
        name=device.name,
        kind=device.kind,
        alg=device.alg,
        public_key=device.public_key,
        status=device.status.value,
        # The push address stays on the server: it is the device's, not the caller's, to share.
        push=PushView(kind=device.push.kind) if device.push else None,
        capabilities=[
            CapabilityView(**(c.as_dict() | {"label": c.shown_label}), granted=d.granted)
            for d in device.capabilities
            for c in (d.capability,)
        ],
        created_at=device.created_at.isoformat(),
        last_seen_at=device.last_seen_at.isoformat() if device.last_seen_at else None,
    )


def session_view(session: Session) -> SessionView:
    return SessionView(
        session_id=session.session_id,
        kind=session.kind.value,
        attended=session.attended,
        created_at=session.created_at.isoformat(),
        updated_at=session.updated_at.isoformat(),
    )


def device_invocation(invocation: Invocation) -> dict[str, Any]:
    """An invocation as its device fetches it (and as the WebSocket frame carries it)."""
    summary = invocation.arguments.get("summary") if invocation.capability == "phone_actions" else None
    return {
        "id": invocation.invocation_id,
        "tool": invocation.tool,
        "capability": invocation.capability,
        "arguments": dict(invocation.arguments),
        "summary": summary if isinstance(summary, str) else None,
        "created_at": invocation.created_at.isoformat(),
        "expires_at": invocation.expires_at.isoformat(),
        # The code the agent's view shows too, when the call was approved first: the card repeats it.
        "binding_code": invocation.binding_code,
    }
