"""The composition root: settings in, adapters chosen, the gateway and the app out."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from tapgate.adapters.clock import SystemClock
from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.store.urls import engine_url
from tapgate.adapters.wake.local import LocalWake
from tapgate.adapters.wake.postgres import PostgresListener
from tapgate.api.app import create_app
from tapgate.config import Settings
from tapgate.domain.errors import ConfigurationError
from tapgate.domain.policy import PolicySet, parse_policies
from tapgate.gateway import Background, Gateway
from tapgate.ports import Clock, Store
from tapgate.services.context import Limits


def limits_from(settings: Settings) -> Limits:
    return Limits(
        invocation_timeout_seconds=settings.invocation_timeout_seconds,
        device_call_timeout_seconds=settings.device_call_timeout_seconds,
        ingest_daily_cap=settings.ingest_daily_cap,
        approval_sign_ttl_seconds=settings.approval_sign_ttl_seconds,
        max_devices_per_user=settings.max_devices_per_user,
        max_open_confirmations=settings.max_open_confirmations,
        require_device_signature=settings.require_device_signature,
        invocation_poll_seconds=settings.invocation_poll_seconds,
        live_ack_seconds=settings.live_ack_seconds,
        triage_idle_seconds=settings.triage_idle_seconds,
        not_me_cooldown_seconds=settings.not_me_cooldown_seconds,
    )


def load_policies(settings: Settings) -> PolicySet:
    """The rules of ``policies_file``; a file that does not parse stops the start with its line."""
    if not settings.policies_file:
        return PolicySet()
    path = Path(settings.policies_file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigurationError(f"policies_file {path} cannot be read: {e.strerror}.") from e
    return parse_policies(text, source=str(path))


def build_gateway(settings: Settings, store: Store | None = None, clock: Clock | None = None) -> Gateway:
    wake = getattr(store, "wake", None) or LocalWake()
    background: list[Background] = []
    if store is None:
        store = open_sql_store(settings.database_url, wake=wake)
        url = engine_url(settings.database_url)
        if url.get_backend_name() == "postgresql":
            dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
            background.append(PostgresListener(dsn, wake))
    return Gateway(
        store=store,
        clock=clock or SystemClock(),
        wake=wake,
        limits=limits_from(settings),
        device_channel=settings.devices_enabled,
        public_url=settings.public_url,
        policies=load_policies(settings),
        background=background,
    )


def build_app(settings: Settings, store: Store | None = None, clock: Clock | None = None) -> FastAPI:
    return create_app(build_gateway(settings, store, clock), max_body_bytes=settings.max_body_bytes)


def app_from_environment() -> FastAPI:
    """The uvicorn factory used by ``tapgate serve``: settings from TAPGATE_CONFIG and TAPGATE_*."""
    import os

    from tapgate import faults
    from tapgate.config import load_settings
    from tapgate.logs import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level)
    faults.arm_from(os.environ)
    return build_app(settings)
