"""The FastAPI application: routes mounted, errors mapped, middleware in place."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.telemetry import TelemetryConfig
from prometheus_client import CollectorRegistry
from starlette.routing import Route, WebSocketRoute

from tapgate import __version__
from tapgate.api import errors, reference
from tapgate.api.console import headers as console_headers
from tapgate.api.console import routes as console
from tapgate.api.db_metrics import register_db_metrics
from tapgate.api.fast.ahead import ServedAhead
from tapgate.api.fast.first import FirstApp
from tapgate.api.json_keys import NoRepeatedKeys
from tapgate.api.lapse import EndOnLapse
from tapgate.api.mcp import McpEndpoint
from tapgate.api.middleware import BodyLimit, HttpMetrics, Observe
from tapgate.api.push_metrics import register_push_metrics
from tapgate.api.routes import (
    accounts,
    agents,
    approvals,
    audit,
    console_sign_in,
    device,
    devices,
    events,
    health,
    invocations,
    link,
    mandates,
    notices,
    pairings,
    passkeys,
    proofs,
    tokens,
    webapp,
)
from tapgate.api.schemas import ErrorBody
from tapgate.api.streams import StreamLimit, StreamSlots
from tapgate.gateway import Gateway
from tapgate.mcp_server.http import McpHttp
from tapgate.mcp_server.server import DEFAULT_WAIT

# FastAPI's own OpenTelemetry (spans, metrics, and log records of validation failures and exceptions with
# their messages) stays off: tapgate's metrics are its Prometheus registry, and its logs carry no argument
# text or message body (docs/security.md), which an exception's message may. Off, it also costs nothing per
# request (on, FastAPI looks up the global providers on every request and connection).
_NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in {
        400: "Malformed: the body is not the JSON this route reads",
        401: "No token, or one tapgate does not know",
        403: "The token lacks the kind or scope, or a signature is refused",
        404: "Unknown, or not yours (the two are never told apart)",
        409: "Conflict: it exists, or was decided already",
        413: "The body is too large",
        422: "A field is invalid; the message names it",
        429: "A cap or rate; Retry-After says when to try again",
    }.items()
}


def _settle_heap() -> None:
    """Tunes Python's collector for the long-running server once the gateway has started.

    Everything alive then (the libraries' code, the schema, the caches' first contents: about 250,000
    objects) is moved out of the collector's sight: a full collection otherwise walks all of them every
    few thousand requests, a long pause each time. The youngest generation is collected every 10,000
    allocations rather than 700: a request's objects mostly die young, so fewer, larger collections find
    the same garbage for less work."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def create_app(
    gateway: Gateway,
    max_body_bytes: int = 65_536,
    mcp_wait: float = DEFAULT_WAIT,
    web_push_key: str | None = None,
    max_streams_per_credential: int = 8,
    settle_heap: bool = False,
    bypasses_off: frozenset[str] = frozenset(),
) -> FastAPI:
    """The HTTP API over ``gateway``; when the device channel is on, also the MCP server at ``/mcp`` (its
    tool calls held ``mcp_wait`` seconds) and the browser phone app at ``/app`` (``web_push_key`` is the
    VAPID public key it subscribes to Web Push with). Closing the app closes the gateway. ``settle_heap``:
    the app is the process's one server (``tapgate serve``), so it may tune the process's collector.
    ``bypasses_off``: the faster paths beside the framework's left out (``bootstrap.BYPASSES``)."""
    mcp = McpHttp(gateway, gateway.public_url, mcp_wait) if gateway.device_channel else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        if settle_heap:
            _settle_heap()
        try:
            async with AsyncExitStack() as stack:
                if mcp is not None:  # a mounted MCP app's own lifespan never runs: the app runs its manager
                    await stack.enter_async_context(mcp.run())
                yield
        finally:
            await gateway.close()

    app = FirstApp(
        title="tapgate",
        version=__version__,
        summary="Let an AI agent act on a person's devices while the person stays in charge.",
        lifespan=lifespan,
        docs_url=None,  # /docs is drawn by tapgate.api.reference: FastAPI's pulls scripts from a CDN
        redoc_url=None,
        telemetry=_NO_TELEMETRY,
    )
    app.state.gateway = gateway
    app.state.web_push_key = web_push_key
    app.state.metrics = CollectorRegistry()
    app.state.stream_slots = StreamSlots(max_streams_per_credential)
    errors.install(app)
    reference.install(app)
    # A request is matched against the routes in order: the ones every call and message runs come first.
    app.include_router(invocations.router, responses=_ERRORS)
    if gateway.device_channel:
        app.include_router(device.router, responses=_ERRORS)
    app.include_router(health.router)
    app.include_router(accounts.router, responses=_ERRORS)
    app.include_router(tokens.router, responses=_ERRORS)
    app.include_router(audit.router, responses=_ERRORS)
    app.include_router(agents.router, responses=_ERRORS)
    app.include_router(events.router, responses=_ERRORS)
    app.state.link_metrics = link.LinkMetrics(app.state.metrics)
    register_db_metrics(app.state.metrics)
    if gateway.device_channel:
        # With either device flag off, no device route exists at all (gate G12).
        app.include_router(devices.router, responses=_ERRORS)
        app.include_router(pairings.router, responses=_ERRORS)
        app.include_router(approvals.router, responses=_ERRORS)
        app.include_router(mandates.router, responses=_ERRORS)
        app.include_router(proofs.router, responses=_ERRORS)
        app.include_router(passkeys.router, responses=_ERRORS)
        assert mcp is not None
        app.router.routes.append(Route(McpEndpoint.path, McpEndpoint(gateway, mcp), include_in_schema=False))
        app.include_router(webapp.router)
        app.mount("/app", webapp.static_app(), name="app")
        app.include_router(notices.router, responses=_ERRORS)
        app.include_router(console_sign_in.router, responses=_ERRORS)
        app.include_router(console.router)
        app.mount("/console/static", console_headers.static_files(), name="console-static")
    if gateway.push_stats is not None:
        register_push_metrics(app.state.metrics, gateway.push_stats)
    app.add_middleware(NoRepeatedKeys)
    app.add_middleware(EndOnLapse, gateway=gateway)
    app.add_middleware(StreamLimit, slots=app.state.stream_slots)
    app.add_middleware(console_headers.ConsoleHeaders)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.state.http_metrics = HttpMetrics(app.state.metrics)
    app.add_middleware(Observe, metrics=app.state.http_metrics)
    if "link" in bypasses_off:
        if gateway.device_channel:
            app.router.routes.append(WebSocketRoute(link.PATH, link.connect))
    else:
        app.link_served = gateway.device_channel  # the device link passes through nothing of the above
    if "ahead" not in bypasses_off:
        # Nor does a request to a planned route: it is served with what the above do for it.
        planned = [*invocations.router.routes, *(device.router.routes if gateway.device_channel else [])]
        app.ahead = ServedAhead(
            [r for r in planned if isinstance(r, APIRoute)],
            gateway,
            app.state.http_metrics,
            app.state.stream_slots,
            max_body_bytes,
        )
    return app
