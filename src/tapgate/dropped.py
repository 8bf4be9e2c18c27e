"""Sending a request again, once, when its connection dropped before any answer came.

A server closes a keep-alive connection it has held idle for a while (tapgate's ``keep_alive_seconds``).
A request that goes out on such a connection just as the server closes it fails before any answer:
httpx raises RemoteProtocolError ("Server disconnected without sending a response"), or ReadError /
WriteError for a reset. The server never saw that request, so a request that is safe to repeat is sent
once more, on a fresh connection. Safe to repeat: a GET (or HEAD, OPTIONS), and a request its sender marks
with ``extensions={RETRY_DROPPED: True}`` because it is idempotent on the server (``POST /v1/invocations``
with an ``invocation_id``: a replay answers the same call). Everything else fails as before, since the
server may have acted on it. A failure after the answer began (a cut stream), a timeout or a refused
connection is never retried here.

The clients (``tapgate.client.Client``, so ``tapgate mcp``, and the terminal phone) wrap their transport
in ``RetryDropped``. Only httpx is imported: the client stands alone.
"""

from __future__ import annotations

import httpx

__all__ = ["DROPPED", "RETRY_DROPPED", "RetryDropped", "safe_to_repeat"]

RETRY_DROPPED = "tapgate.retry_dropped"  # request extension: this non-GET is idempotent on the server
DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)  # before any answer, here
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def safe_to_repeat(request: httpx.Request) -> bool:
    """Whether ``request`` may be sent twice without the server acting twice, and can be (its body is
    in memory, not a stream already read)."""
    if not isinstance(request.stream, httpx.ByteStream):
        return False
    return request.method in _SAFE_METHODS or bool(request.extensions.get(RETRY_DROPPED))


class RetryDropped(httpx.AsyncBaseTransport):
    """A transport that sends a request safe to repeat once more when its connection dropped before any
    answer (see the module docstring); the answer or the error of the second try is final."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            # The inner transport returns once the answer's head has come; an error raised here means
            # no answer at all (an error while reading the body is raised later, from the stream).
            return await self._inner.handle_async_request(request)
        except DROPPED:
            if not safe_to_repeat(request):
                raise
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
