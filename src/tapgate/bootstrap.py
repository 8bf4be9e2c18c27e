"""The composition root: settings in, adapters chosen, the gateway and the app out."""

from __future__ import annotations

from fastapi import FastAPI

from tapgate.adapters.clock import SystemClock
from tapgate.adapters.store.sql import open_sql_store
from tapgate.api.app import create_app
from tapgate.config import Settings
from tapgate.gateway import Gateway, Limits
from tapgate.ports import Clock, Store


def limits_from(settings: Settings) -> Limits:
    return Limits(
        invocation_timeout_seconds=settings.invocation_timeout_seconds,
        device_call_timeout_seconds=settings.device_call_timeout_seconds,
        ingest_daily_cap=settings.ingest_daily_cap,
        approval_sign_ttl_seconds=settings.approval_sign_ttl_seconds,
        max_devices_per_user=settings.max_devices_per_user,
        max_open_confirmations=settings.max_open_confirmations,
        require_device_signature=settings.require_device_signature,
    )


def build_gateway(settings: Settings, store: Store | None = None, clock: Clock | None = None) -> Gateway:
    return Gateway(
        store=store or open_sql_store(settings.database_url),
        clock=clock or SystemClock(),
        limits=limits_from(settings),
        device_channel=settings.devices_enabled,
        public_url=settings.public_url,
    )


def build_app(settings: Settings, store: Store | None = None, clock: Clock | None = None) -> FastAPI:
    return create_app(build_gateway(settings, store, clock), max_body_bytes=settings.max_body_bytes)


def app_from_environment() -> FastAPI:
    """The uvicorn factory used by ``tapgate serve``: settings from TAPGATE_CONFIG and TAPGATE_*."""
    from tapgate.config import load_settings
    from tapgate.logs import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level)
    return build_app(settings)
