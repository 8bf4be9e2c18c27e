"""What every push sender shares on the wire: one bounded POST that never follows a redirect, compact JSON
and compact JWTs.

Failure messages name the service and the status or the error's class, never a URL (a Web Push endpoint
or a relay URL can hold a capability), a token or a payload.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from tapgate.domain.errors import PushFailed
from tapgate.domain.push import PushMessage

MAX_REPLY_BYTES = 64 * 1024  # error bodies are small; a reply is never read further than this


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: httpx.Headers
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


async def post(
    client: httpx.AsyncClient,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    within: float,
    service: str,
) -> Reply:
    """POST ``content`` and read at most MAX_REPLY_BYTES of the reply, all within ``within`` seconds.

    Raises PushFailed: retryable for a network error or the deadline (a reply still trickling in counts),
    not retryable for a URL the client cannot send to.
    """
    try:
        with anyio.fail_after(within):
            async with client.stream(
                "POST", url, content=content, headers=dict(headers), follow_redirects=False
            ) as response:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk[: MAX_REPLY_BYTES - len(body)]
                    if len(body) >= MAX_REPLY_BYTES:
                        break
    except TimeoutError as e:
        raise PushFailed(f"{service} did not answer within {within:g} s.", retryable=True) from e
    except (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL) as e:
        raise PushFailed(f"{service} cannot be sent to ({type(e).__name__}).", retryable=False) from e
    except httpx.TransportError as e:
        raise PushFailed(f"{service} could not be reached ({type(e).__name__}).", retryable=True) from e
    return Reply(response.status_code, response.headers, bytes(body))


def refused(service: str, reply: Reply, reason: str = "") -> PushFailed:
    """The failure for a non-2xx reply: a redirect or a 4xx is final, a 429 or a 5xx may pass later."""
    retryable = reply.status == 429 or reply.status >= 500
    detail = f" ({reason})" if reason else ""
    return PushFailed(f"{service} answered {reply.status}{detail}.", retryable=retryable)


def check_kind(message: PushMessage, kind: str) -> None:
    """Raises PushFailed when a message for another push kind reaches this sender (a wiring error)."""
    if message.target.kind != kind:
        raise PushFailed(f"A {message.target.kind!r} push reached the {kind} sender.", retryable=False)


def canonical_json(value: object) -> bytes:
    """Sorted keys, no spaces, ASCII: the same bytes for the same value in any language."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def compact_jwt(
    header: Mapping[str, object], claims: Mapping[str, object], sign: Callable[[bytes], bytes]
) -> str:
    """A JWS in compact form: ``sign`` turns the signing input into the raw signature."""
    signing_input = f"{b64url(canonical_json(header))}.{b64url(canonical_json(claims))}".encode()
    return f"{signing_input.decode()}.{b64url(sign(signing_input))}"
