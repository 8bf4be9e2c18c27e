"""A device asking the person for a grant: an approval of kind ``grant``.

A device never raises its own grants. A capability it marks ``granted: true`` when it re-declares its
manifest becomes this request on the person's approvers. Its planned action, hashed into the signed text
like any other approval's, is the device and the capability's whole manifest entry (kind, description,
params and ``confirm``: the bar the person grants it at), so the person signs exactly what they saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tapgate.domain.devices import APPROVALS, Capability, Device
from tapgate.domain.shown import shown

GRANT = "grant"


def grant_arguments(device: Device, capability: Capability) -> dict[str, Any]:
    """The planned action's arguments: the device and the manifest entry the grant is for."""
    return {"device_id": device.device_id, "name": device.name, "capability": capability.as_dict()}


def _param(name: str, spec: Mapping[str, Any]) -> str:
    kind = spec["type"] + (f" of {', '.join(spec['enum'])}" if spec.get("enum") else "")
    return f"{name} ({kind}{', required' if spec.get('required') else ''})"


def grant_preview(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``{kind, fields}`` like every approval's preview: the device, the capability and its bar."""
    entry = arguments["capability"]
    params = entry["params"]
    fields = [
        ("Device", arguments["name"]),
        ("Device id", arguments["device_id"]),
        ("Capability", entry["name"]),
        ("What it does", entry["description"] or "(no description)"),
        ("Asks you before each call", "yes" if entry["confirm"] else "no"),
        ("Parameters", "; ".join(_param(n, s) for n, s in params.items()) if params else "none"),
    ]
    return {"kind": GRANT, "fields": [{"label": label, "value": shown(value)} for label, value in fields]}


def grant_prompt(device: Device, capability: Capability) -> str:
    what = (
        "to approve for you (see and sign all your approvals)"
        if capability.name == APPROVALS
        else f"you to let your agents use {capability.name}"
    )
    return f"{device.name} asks {what}. Approve only if you asked for this on the device yourself."


def grants_note(asked: list[str], unasked: list[str]) -> str | None:
    """What a re-declaring device is told of the grants it marked itself: they wait for the person."""
    parts = []
    if asked:
        parts.append(
            f"{', '.join(asked)}: waiting for the person to approve the grant on a device that approves "
            "for them."
        )
    if unasked:
        parts.append(
            f"{', '.join(unasked)}: not granted; the person grants it in the console (no device of theirs "
            "can approve it)."
        )
    return " ".join(parts) or None
