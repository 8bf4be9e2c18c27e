"""The ``tapgate_request_mandate`` MCP tool: an agent asks the person for a standing mandate, and reads
back its status (it waits for the person's signature on their phone)."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from mcp_types import CallToolResult, TextContent, Tool

from tapgate.domain.errors import InvalidInput
from tapgate.mcp_server.hints import tapgate_hints

MANDATE_TOOL = "tapgate_request_mandate"

_VALUE = {"type": ["string", "number", "boolean"]}
MANDATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tools": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "maxItems": 16,
            "description": "The exact tool names the mandate covers.",
        },
        "constraints": {
            "type": "object",
            "description": (
                "Per parameter, one of {equals: v}, {one_of: [v, …]} (up to 50), {matches: regex} (up to "
                "200 characters), {max: number}, {max_length: n}. Every listed tool must declare it."
            ),
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "equals": _VALUE,
                    "one_of": {"type": "array", "items": _VALUE},
                    "matches": {"type": "string"},
                    "max": {"type": "number"},
                    "max_length": {"type": "integer"},
                },
                "minProperties": 1,
                "maxProperties": 1,
                "additionalProperties": False,
            },
        },
        "max_calls": {"type": "integer", "minimum": 1, "maximum": 1000},
        "per_day": {"type": "integer", "minimum": 1, "description": "Calls per server UTC day."},
        "expires_in_seconds": {"type": "integer", "minimum": 60, "maximum": 2_592_000},
        "purpose": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "Why: the person reads it.",
        },
        "any_agent": {"type": "boolean", "description": "For any of the person's agents, not only this one."},
    },
    "required": ["tools", "max_calls", "expires_in_seconds", "purpose"],
    "additionalProperties": False,
}
MANDATE_TOOL_DEFINITION = Tool(
    name=MANDATE_TOOL,
    description=(
        "[TAPGATE] Ask the person for a standing mandate: once they sign it on their phone, calls to these "
        "tools within these bounds go through without asking them each time. Use it when a call was "
        "awaiting approval and more like it will follow. It answers the mandate's status "
        "(awaiting_signature until the person signs)."
    ),
    input_schema=MANDATE_SCHEMA,
    title="Ask the person for a standing mandate",
    # It only asks: nothing changes until the person signs on their phone.
    annotations=tapgate_hints("Ask the person for a standing mandate", reads=False),
)
_VALIDATOR = Draft202012Validator(MANDATE_SCHEMA)


def mandate_body(arguments: dict[str, Any]) -> dict[str, Any]:
    """The HTTP body for the arguments, checked against the tool's schema. Raises InvalidInput."""
    problem = next(iter(sorted(_VALIDATOR.iter_errors(arguments), key=lambda e: e.path)), None)
    if problem is not None:
        where = ".".join(str(p) for p in problem.absolute_path) or "arguments"
        raise InvalidInput(where, f"{MANDATE_TOOL}: {where}: {problem.message}.")
    body = {k: v for k, v in arguments.items() if k != "any_agent"}
    if arguments.get("any_agent"):
        body["agent_id"] = None
    return body


def mandate_result(answer: dict[str, Any]) -> CallToolResult:
    text = (
        f"Mandate {answer['mandate_id']} is {answer['status']}. The person signs it on their phone; until "
        "then, calls still ask them. Its status: GET /v1/mandates/" + answer["mandate_id"] + "."
    )
    return CallToolResult(content=[TextContent(text=text)], structured_content=answer)
