"""What an MCP client may show or decide about a tool before calling it: its title and its hints
(``readOnlyHint``, ``destructiveHint``, ``openWorldHint``), from the capability the tool calls.

A client reads these as hints only; whatever they say, every call still goes through tapgate's checks.
"""

from __future__ import annotations

from typing import Any

from mcp_types import Tool, ToolAnnotations

from tapgate.domain.capabilities import traits
from tapgate.domain.devices import BUILTINS, PHONE_ACTIONS, CapabilityKind
from tapgate.domain.tools import CAPABILITY_META, PHONE_ACTION


def hints(capability: str, kind: str, title: str | None) -> ToolAnnotations:
    """A sensor only reads; an actuator changes something in the world, and a message or a call reaches
    another person. Every hint is given, since MCP's defaults assume the worst of a tool left silent."""
    reaches = traits(capability).message  # a message or a call reaches someone other than the person
    reads = kind == CapabilityKind.SENSOR and not reaches
    return ToolAnnotations(
        title=title,
        read_only_hint=reads,
        destructive_hint=not reads,
        idempotent_hint=reads,
        open_world_hint=reaches,
    )


def tapgate_hints(title: str, *, reads: bool) -> ToolAnnotations:
    """One of tapgate's own tools: it reaches no device, and no one but the person."""
    return ToolAnnotations(
        title=title,
        read_only_hint=reads,
        destructive_hint=False,
        idempotent_hint=reads,
        open_world_hint=False,
    )


def annotated(listed: dict[str, Any]) -> Tool:
    """A tool of the gateway's MCP listing, with its title and hints when it calls a capability."""
    tool = Tool.model_validate(listed)
    capability = (tool.meta or {}).get(CAPABILITY_META)
    if isinstance(capability, dict):
        name, kind = str(capability.get("name")), str(capability.get("kind"))
    elif tool.name == PHONE_ACTION:
        builtin = BUILTINS[PHONE_ACTIONS]
        name, kind = builtin.name, builtin.kind.value
        tool = tool.model_copy(update={"title": builtin.shown_label})
    else:
        return tool
    return tool.model_copy(update={"annotations": hints(name, kind, tool.title)})
