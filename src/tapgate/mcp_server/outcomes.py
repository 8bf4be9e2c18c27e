"""What the model reads after a tool call: an invocation's outcome as an MCP tool result.

``isError`` is set when the action did not happen for a reason the model should act on: refused
(``[deny] …`` by tapgate's checks, ``[policy] …`` by policy or the person's approval), unavailable,
failed, or expired (the device did not answer). A call still open when the wait ends is not an error:
its text gives the invocation id, the binding code when the person is asked, and how to fetch the
result later, so an answer that comes late is not lost.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from mcp_types import CallToolResult, TextContent

from tapgate.client import Invocation

RESULT_TOOL = "tapgate_result"
ERROR_STATUSES = frozenset({"refused", "unavailable", "failed", "expired"})


def tool_result(call: Invocation) -> CallToolResult:
    """The call's outcome as text content, its invocation view as structured content."""
    return CallToolResult(
        content=[TextContent(text=describe(call))],
        structured_content=_view(call),
        is_error=call.status in ERROR_STATUSES,
    )


def error_result(text: str) -> CallToolResult:
    """A call that never became an invocation (a bad ``tapgate_result`` call, an unknown id)."""
    return CallToolResult(content=[TextContent(text=text)], is_error=True)


def later(call: Invocation) -> str:
    return (
        f"Call {RESULT_TOOL} with invocation_id={call.id} (and wait=<seconds>) to get the result; "
        "do not repeat the call."
    )


def describe(call: Invocation) -> str:
    """The sentence the model reads for each status."""
    if call.status in ("refused", "unavailable"):
        return call.reason or f"[deny] the call was {call.status}"
    if call.status == "awaiting_approval":
        return (
            (f"{call.reason}. " if call.reason else "")
            + f"The person is asked to approve this on their device; the card shows the code "
            f"{call.binding_code}. Tell them the code so they can match the card. The call is still open "
            f"(invocation {call.id}). {later(call)}"
        )
    if call.status == "pending":
        approved = " The person approved it;" if call.binding_code else ""
        offline = (
            " The device is offline (no live link, no push route): it gets the call when it comes back, "
            "if that is before the call expires."
            if call.device_online is False
            else ""
        )
        return (
            f"{approved} The device has not answered yet (invocation {call.id}).{offline} {later(call)}"
        ).lstrip()
    if call.result is not None:
        return call.result.text
    return f"The call ended {call.status}."


def _view(call: Invocation) -> dict[str, Any]:
    view = asdict(call)
    view["created_at"] = call.created_at.isoformat()
    view["resolved_at"] = call.resolved_at.isoformat() if call.resolved_at else None
    return view
