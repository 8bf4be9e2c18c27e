"""ASGI middleware: the body size limit, request metrics and the access log."""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tapgate.api.bounded_http import ANSWERED
from tapgate.api.errors import error_response
from tapgate.domain.errors import TooLarge

access = logging.getLogger("tapgate.access")


class BodyLimit:
    """Refuse bodies over ``max_bytes`` with 413, whether announced by Content-Length or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"The body is over {self.max_bytes} bytes; send less."
        await error_response(413, TooLarge.code, message)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await self._refuse(scope, receive, send)
                return
        if not any(name == b"content-length" for name, _ in scope["headers"]):
            # A streamed body: read it whole (it is small or refused) and replay it to the app.
            chunks, seen, more = [], 0, True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    break
                chunks.append(message.get("body", b""))
                seen += len(chunks[-1])
                more = message.get("more_body", False)
                if seen > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
            body = b"".join(chunks)
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)


class HttpMetrics:
    """Every request counted and timed by route template, and one access log line without bodies."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "tapgate_http_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "tapgate_http_request_seconds",
            "HTTP request latency by route",
            ["method", "route"],
            registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 30),
        )
        # Each (method, route, status)'s counter and histogram, found once: prometheus-client's ``labels``
        # would look them up again on every request. As many as the labelled series themselves (routes
        # are templates).
        self._series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def record(self, method: str, template: str, status: int, started: float) -> None:
        """A request to ``template`` answered ``status``; it began at ``started`` (``perf_counter``)."""
        elapsed = time.perf_counter() - started
        key = (method, template, status)
        series = self._series.get(key)
        if series is None:
            series = (
                self.requests.labels(method, template, str(status)),
                self.latency.labels(method, template),
            )
            self._series[key] = series
        series[0].inc()
        series[1].observe(elapsed)
        if access.isEnabledFor(logging.INFO):
            extra = {"method": method, "route": template, "status": status, "ms": round(elapsed * 1000, 2)}
            access.info("request", extra=extra)


class Observe:
    """Records every HTTP request in ``metrics``."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or _mounted(scope)
            self.metrics.record(scope["method"], template, scope.get(ANSWERED, status), started)


def _mounted(scope: Scope) -> str:
    """The template of a request a mounted app answered (the browser app's files): the mount's
    path, which the router wrote into root_path, and ``{path}``; else ``unmatched``."""
    root = scope.get("root_path", "")
    return f"{root}/{{path}}" if root else "unmatched"
