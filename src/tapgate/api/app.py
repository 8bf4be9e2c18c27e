"""The FastAPI application: routes mounted, errors mapped, middleware in place."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from tapgate import __version__
from tapgate.api import errors
from tapgate.api.middleware import BodyLimit, Observe
from tapgate.api.push_metrics import register_push_metrics
from tapgate.api.routes import (
    accounts,
    agents,
    approvals,
    audit,
    device,
    devices,
    events,
    health,
    invocations,
    link,
    notices,
    pairings,
)
from tapgate.gateway import Gateway


def create_app(gateway: Gateway, max_body_bytes: int = 65_536) -> FastAPI:
    """The HTTP API over ``gateway``; closing the app closes the gateway."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.close()

    app = FastAPI(
        title="tapgate",
        version=__version__,
        summary="Let an AI agent act on a person's devices while the person stays in charge.",
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    app.state.metrics = CollectorRegistry()
    errors.install(app)
    app.include_router(health.router)
    app.include_router(accounts.router)
    app.include_router(audit.router)
    app.include_router(agents.router)
    app.include_router(invocations.router)
    app.include_router(events.router)
    app.state.link_metrics = link.LinkMetrics(app.state.metrics)
    if gateway.device_channel:
        # With either device flag off, no device route exists at all (gate G12).
        app.include_router(devices.router)
        app.include_router(pairings.router)
        app.include_router(device.router)
        app.include_router(link.router)
        app.include_router(approvals.router)
        app.include_router(notices.router)
    if gateway.push_stats is not None:
        register_push_metrics(app.state.metrics, gateway.push_stats)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(Observe, registry=app.state.metrics)
    return app
