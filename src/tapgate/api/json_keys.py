"""Every JSON body names each key once: a body that repeats one (at any depth) is 400, before any route
reads it, so no two parsers can disagree on which value counts."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from tapgate.api.errors import error_response
from tapgate.api.replay import read_whole, replaying
from tapgate.domain.errors import MalformedRequest


class _Repeated(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Repeated(key)
        seen[key] = value
    return seen


def parse_once(body: bytes) -> tuple[Any, str | None]:
    """The JSON ``body`` parsed, and the first key it repeats, in one parse: (its value, None); (None,
    the key) if it repeats one; (None, None) if it is not JSON at all (the route answers that)."""
    try:
        return json.loads(body, object_pairs_hook=_no_repeats), None
    except _Repeated as e:
        return None, e.key
    except (ValueError, RecursionError):
        return None, None


def repeated_key(body: bytes) -> str | None:
    """The first key the JSON ``body`` repeats; None if it repeats none or is not JSON at all."""
    return parse_once(body)[1]


class NoRepeatedKeys:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH", "DELETE"):
            await self.app(scope, receive, send)
            return
        body, messages = await read_whole(receive)
        key = repeated_key(body) if body and body.lstrip()[:1] in (b"{", b"[") else None
        if key is not None:
            shown = key if len(key) <= 40 else key[:40] + "…"
            message_text = f"The body repeats the key {shown!r}; name each field once."
            await error_response(400, MalformedRequest.code, message_text)(scope, receive, send)
            return
        await self.app(scope, replaying(messages, receive), send)
