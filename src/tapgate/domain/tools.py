"""Tools: what an agent sees of a person's devices, and how a tool's name maps back to them.

A device tool is named ``device__<device_id with - as _>__<capability>``. Device ids never hold ``_``
and capability names never hold ``__``, so a name splits back exactly. Names are at most 64 characters.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tapgate.domain import phone_action
from tapgate.domain.devices import CAPABILITY_NAME, Capability, Device
from tapgate.domain.errors import InvalidInput

PREFIX = "device__"
MAX_TOOL_NAME = 64
PHONE_ACTION = "phone_action"
# Where an MCP device tool carries the capability it calls (name and kind), for the MCP layer's hints.
CAPABILITY_META = "tapgate/capability"
_NAME = re.compile(r"^device__([a-z0-9]+(?:_[a-z0-9]+)*)__([a-z][a-z0-9]*(?:_[a-z0-9]+)*)$")


class ToolFormat(StrEnum):
    OPENAI = "openai"
    MCP = "mcp"


@dataclass(frozen=True, slots=True)
class ToolName:
    device_id: str
    capability: str

    def __str__(self) -> str:
        return f"{PREFIX}{self.device_id.replace('-', '_')}__{self.capability}"

    @classmethod
    def parse(cls, name: str) -> ToolName:
        """Split a device tool's name. Raises InvalidInput if it is not one."""
        match = _NAME.fullmatch(name) if len(name) <= MAX_TOOL_NAME else None
        if match is None or not CAPABILITY_NAME.fullmatch(match.group(2)):
            raise InvalidInput("tool", "tool is not a device tool name (device__<device>__<capability>).")
        return cls(match.group(1).replace("_", "-"), match.group(2))

    def fits(self) -> bool:
        return len(str(self)) <= MAX_TOOL_NAME


def meant(tool: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that ``tool`` is most likely a typo of, or None when none is close."""
    close = difflib.get_close_matches(tool, list(names), n=1, cutoff=0.8)
    return close[0] if close else None


def description(device: Device, capability: Capability) -> str:
    return f"[DEVICE {device.name} ({device.kind}) {capability.kind.value}] {capability.description}".rstrip()


def definition(name: str, text: str, parameters: dict[str, Any], format: ToolFormat) -> dict[str, Any]:
    """One tool in OpenAI function format or MCP tool format."""
    if format is ToolFormat.MCP:
        return {"name": name, "description": text, "inputSchema": parameters}
    return {"type": "function", "function": {"name": name, "description": text, "parameters": parameters}}


def device_tool(device: Device, capability: Capability, format: ToolFormat) -> dict[str, Any]:
    tool = definition(
        str(ToolName(device.device_id, capability.name)),
        description(device, capability),
        capability.json_schema(),
        format,
    )
    if format is ToolFormat.MCP:
        tool["title"] = capability.shown_label
        tool["_meta"] = {CAPABILITY_META: {"name": capability.name, "kind": capability.kind.value}}
    return tool


def phone_action_tool(format: ToolFormat) -> dict[str, Any]:
    """The ``phone_action`` session tool, as its catalogue defines it."""
    return phone_action.tool_definition(format)
