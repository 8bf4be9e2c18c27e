"""Showing the person at the desk where an approval waits: a URL-mode elicitation naming the console's
approvals page, sent to a client that declared it can open one.

The elicitation points, and decides nothing: whatever the client answers (accept, decline, cancel),
the call or the mandate waits for the person's signature on their phone, as it would without it.

On a 2026-07-28 connection the server may not send requests of its own, so the page travels in an
``input_required`` result: the client opens it, then sends the same call again with the state it was
given (the invocation or mandate id, read back through the caller's own backend, so an echoed id gives
nothing the caller could not read with ``tapgate_result``). On an earlier connection the server sends
``elicitation/create`` itself, then goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitRequest, ElicitRequestURLParams, InputRequiredResult
from mcp_types.version import is_version_at_least

log = logging.getLogger(__name__)

_INPUT_REQUIRED_SINCE = "2026-07-28"
_PAGE_KEY = "approval_page"


def can_open_a_page(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared URL-mode elicitation (a bare ``elicitation: {}`` means forms only)."""
    declared = ctx.session.client_capabilities
    return declared is not None and declared.elicitation is not None and declared.elicitation.url is not None


@dataclass(frozen=True, slots=True)
class Pointer:
    """Shows one client one page; ``bound`` caps the wait for an earlier connection's answer."""

    ctx: ServerRequestContext[Any, Any]
    url: str
    bound: float

    @classmethod
    def for_client(cls, ctx: ServerRequestContext[Any, Any], url: str, bound: float) -> Pointer | None:
        return cls(ctx, url, bound) if can_open_a_page(ctx) else None

    @property
    def returns(self) -> bool:
        """Whether the page goes out in an ``input_required`` result the client answers by calling again."""
        return is_version_at_least(self.ctx.protocol_version, _INPUT_REQUIRED_SINCE)

    async def show(
        self, message: str, elicitation_id: str, then: Callable[[], Awaitable[CallToolResult]]
    ) -> CallToolResult | InputRequiredResult:
        """Point the client at the page, then answer with ``then()``; ``elicitation_id`` is also the state
        a returning client sends back."""
        page = ElicitRequestURLParams(message=message, url=self.url, elicitation_id=elicitation_id)
        if self.returns:
            return InputRequiredResult(
                input_requests={_PAGE_KEY: ElicitRequest(params=page)}, request_state=elicitation_id
            )
        with anyio.move_on_after(self.bound):
            try:
                answer = await self.ctx.session.elicit_url(
                    message, self.url, elicitation_id, related_request_id=self.ctx.request_id
                )
                log.info("the client was shown the approvals page", extra={"action": answer.action})
            except MCPError as e:
                log.info("the client could not be shown the approvals page", extra={"reason": e.error.code})
        return await then()
