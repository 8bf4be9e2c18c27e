"""An example device: a desk lamp whose handlers the terminal phone runs.

    tapgate device pair "$LINK" lamp.pem desk-lamp --kind lamp --capability @lamp.json
    tapgate device run --state tapgate-phone.json --handlers tapgate.device.examples

``LAMP_MANIFEST`` is what to declare (write it to lamp.json); each handler takes the call's arguments,
does the work (here it only describes it) and returns the message the agent reads, or raises to fail.
"""

from __future__ import annotations

from typing import Any

from tapgate.device.handlers import handler

LAMP_MANIFEST: list[dict[str, Any]] = [
    {
        "name": "set_light",
        "kind": "actuator",
        "label": "Switch the lamp",
        "description": "Turn the lamp on or off and set its brightness.",
        "params": {
            "on": {
                "type": "boolean",
                "required": True,
                "description": "true for on",
                "label": "Light",
                "true_label": "On",
                "false_label": "Off",
            },
            "brightness": {"type": "number", "description": "0-100", "label": "Brightness (%)"},
            "scene": {"type": "string", "enum": ["warm", "cold"], "label": "Scene"},
        },
        "confirm": False,
    },
    {
        "name": "unplug",
        "kind": "actuator",
        "label": "Unplug the lamp",
        "description": "Cut the lamp's power at the socket.",
        "confirm": True,
    },
]


@handler("set_light")
def set_light(arguments: dict[str, Any]) -> str:
    """Switch the lamp; a brightness outside 0-100 fails the call with the reason."""
    if not arguments.get("on"):
        return "the lamp is off"
    brightness = arguments.get("brightness")
    if brightness is None:
        return "the lamp is on"
    if not 0 <= brightness <= 100:
        raise ValueError(f"brightness must be between 0 and 100, not {brightness}")
    scene = arguments.get("scene")
    return f"the lamp is on at {brightness:g}%" + (f", {scene}" if scene else "")


@handler("unplug")
def unplug(arguments: dict[str, Any]) -> str:
    return "the lamp is unplugged"
