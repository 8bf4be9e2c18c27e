"""At most ``max_streams_per_credential`` streams held open at once by one token in this process: event
streams, long-polls (``?wait=`` above 0), the MCP server's stream and device links. The next one gets
429 with a reason, before it holds anything."""

from __future__ import annotations

from collections import Counter
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from tapgate.api.errors import error_response
from tapgate.api.lapse import bearer
from tapgate.domain.errors import RateLimited, Unauthenticated
from tapgate.domain.tokens import parse_token

RETRY_AFTER_SECONDS = 5


class StreamSlots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: Counter[str] = Counter()

    @staticmethod
    def key(token: str) -> str | None:
        try:
            presented = parse_token(token)
        except Unauthenticated:
            return None
        return f"{presented.tenant_id}/{presented.credential_id}"

    def take(self, key: str) -> bool:
        if self._open[key] >= self.limit:
            return False
        self._open[key] += 1
        return True

    def give(self, key: str) -> None:
        self._open[key] -= 1
        if self._open[key] <= 0:
            del self._open[key]

    def refusal(self) -> str:
        return (
            f"This token holds {self.limit} open streams (event streams, long-polls, links) already; "
            "close one, or use another token."
        )


def is_stream(scope: Scope) -> bool:
    """An event stream, the MCP server's stream, or a long-poll that asks to wait."""
    if scope["method"] != "GET":
        return False
    if scope["path"] in ("/v1/events", "/mcp"):
        return True
    waits = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("wait", [])
    try:
        return any(float(w) > 0 for w in waits)
    except ValueError:
        return False  # the route answers 422 at once


class StreamLimit:
    def __init__(self, app: ASGIApp, slots: StreamSlots) -> None:
        self.app = app
        self.slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = bearer(scope) if scope["type"] == "http" and is_stream(scope) else None
        key = self.slots.key(token) if token else None
        if key is None:
            await self.app(scope, receive, send)
            return
        if not self.slots.take(key):
            headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
            await error_response(429, RateLimited.code, self.slots.refusal(), headers)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.slots.give(key)
