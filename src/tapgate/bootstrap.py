"""The composition root: settings in, adapters chosen, the gateway and the app out."""

from __future__ import annotations

import asyncio
import json
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI

from tapgate.adapters.clock import SystemClock
from tapgate.adapters.push import ApnsSender, FcmSender, PushRouter, RelaySender, WebPushSender
from tapgate.adapters.push.webpush import application_server_key
from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.store.urls import engine_url
from tapgate.adapters.wake.local import LocalWake
from tapgate.adapters.wake.postgres import PostgresListener
from tapgate.api.app import create_app
from tapgate.config import Settings
from tapgate.domain.errors import ConfigurationError
from tapgate.domain.policy import PolicySet, parse_policies
from tapgate.gateway import Background, Gateway
from tapgate.listening import DEFAULT_PUBLIC_URL
from tapgate.ports import Clock, PushSender, Store
from tapgate.services.context import Limits

if TYPE_CHECKING:
    from tapgate.adapters.wake.nats_wake import NatsCredentials


def limits_from(settings: Settings) -> Limits:
    """Every limit is a setting of the same name, with ``Limits``' own default."""
    values = {f.name: getattr(settings, f.name) for f in fields(Limits)}
    values["push_retry_seconds"] = tuple(values["push_retry_seconds"])
    return Limits(**values)


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


PUSH_TIMEOUT_SECONDS = 10.0


class _ClosesClient:
    """Closes the push senders' shared HTTP client when the gateway closes (after the push worker)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self._client.aclose()


def new_push_client() -> httpx.AsyncClient:
    """One client for every push service: HTTP/2 where the service speaks it (APNs needs it), no redirects."""
    return httpx.AsyncClient(
        http2=True,
        follow_redirects=False,
        timeout=PUSH_TIMEOUT_SECONDS,
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
    )


def build_push(settings: Settings, clock: Clock, client: httpx.AsyncClient) -> PushRouter:
    """The push senders the settings configure, behind one router. Raises ConfigurationError for a key
    or key file that cannot be used."""
    senders: dict[str, PushSender] = {}
    if settings.webpush.vapid_private_key:
        senders["webpush"] = WebPushSender(
            client,
            settings.webpush.vapid_private_key,
            settings.webpush.subject,
            clock,
            hosts=settings.webpush.hosts,
        )
    apns = settings.apns
    if apns.enabled:
        senders["apns"] = ApnsSender(
            client,
            apns.team_id,
            apns.key_id,
            _read(apns.private_key_file, "apns.private_key_file"),
            apns.topic,
            clock,
            endpoint=apns.endpoint,
        )
    fcm = settings.fcm
    if fcm.enabled:
        senders["fcm"] = FcmSender(
            client, fcm.project_id, _service_account(fcm.service_account_file), clock, endpoint=fcm.endpoint
        )
    relay = None
    if settings.push_relays:
        relay = RelaySender(client, settings.push_relays, settings.relay_secret, clock)
    return PushRouter(senders, relay)


def check_push_settings(settings: Settings) -> None:
    """Raise ConfigurationError now, before serving, if the push settings cannot build their senders."""

    async def check() -> None:
        async with new_push_client() as client:
            build_push(settings, SystemClock(), client)

    asyncio.run(check())


def check_wake_settings(settings: Settings) -> None:
    """Raise ConfigurationError now, before serving, if the wake's broker cannot be reached."""
    if settings.wake_kind == "nats":
        from tapgate.adapters.wake.nats_wake import check_reachable  # see build_gateway

        asyncio.run(check_reachable(settings.nats_url, nats_credentials(settings)))


def nats_credentials(settings: Settings) -> NatsCredentials:
    """What the settings say the gateway proves itself to NATS with, and the TLS it speaks."""
    from tapgate.adapters.wake.nats_wake import NatsCredentials  # see build_gateway

    return NatsCredentials(
        user=settings.nats_user,
        password=settings.nats_password,
        token=settings.nats_token,
        nkey_seed_file=settings.nats_nkey_seed_file,
        tls_ca_file=settings.nats_tls_ca_file,
        tls_cert_file=settings.nats_tls_cert_file,
        tls_key_file=settings.nats_tls_key_file,
    )


def _read(path: str, key: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"{key} {path} cannot be read: {getattr(e, 'strerror', None) or e}.") from e


def _service_account(path: str) -> dict[str, Any]:
    try:
        account = json.loads(_read(path, "fcm.service_account_file"))
    except ValueError as e:
        raise ConfigurationError(f"fcm.service_account_file {path} is not the JSON key file.") from e
    if not isinstance(account, dict):
        raise ConfigurationError(f"fcm.service_account_file {path} is not the JSON key file.")
    return account


def build_gateway(
    settings: Settings,
    store: Store | None = None,
    clock: Clock | None = None,
    push: PushSender | None = None,
    reload_on_sighup: bool = False,
) -> Gateway:
    """The gateway the settings describe. ``store``, ``clock`` and ``push`` replace the adapters the
    settings would choose (tests inject fakes; ``push`` stands for every push sender). The policies file
    is watched for changes; ``reload_on_sighup`` (the server process) also reloads it on SIGHUP."""
    clock = clock or SystemClock()
    background: list[Background] = []
    if store is None:
        kind = settings.wake_kind
        wake: LocalWake = LocalWake()
        if kind == "nats":
            # NATS's client is loaded only where it is the wake: about 10 MiB of every process else.
            from tapgate.adapters.wake.nats_wake import NatsWake

            wake = nats = NatsWake(
                settings.nats_url, settings.invocation_poll_seconds, nats_credentials(settings)
            )
            background.append(nats)
        store = open_sql_store(
            settings.database_url,
            wake=wake,
            database_notify=kind == "postgres",
            raw_statements="raw_sql" not in bypasses_off(),
        )
        url = engine_url(settings.database_url)
        if kind == "postgres" and url.get_backend_name() == "postgresql":
            dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
            background.append(PostgresListener(dsn, wake, origin=store.origin))
    else:
        wake = getattr(store, "wake", None) or LocalWake()
    if push is None and settings.devices_enabled:  # with the device flags off, no push is sent (G12)
        client = new_push_client()
        background.append(_ClosesClient(client))
        push = build_push(settings, clock, client)
    return Gateway(
        store=store,
        clock=clock,
        wake=wake,
        limits=limits_from(settings),
        device_channel=settings.devices_enabled,
        public_url=settings.public_url or DEFAULT_PUBLIC_URL,
        policies=load_policies(settings),
        background=background,
        push=push,
        policies_file=settings.policies_file,
        reload_on_sighup=reload_on_sighup,
    )


def web_push_key(settings: Settings) -> str | None:
    """The VAPID public key browsers subscribe with, or None without a VAPID key. Raises
    ConfigurationError for a key that is not a P-256 private key."""
    vapid = settings.webpush.vapid_private_key
    return application_server_key(vapid) if vapid else None


def build_app(
    settings: Settings,
    store: Store | None = None,
    clock: Clock | None = None,
    push: PushSender | None = None,
    reload_on_sighup: bool = False,
    serving: bool = False,
) -> FastAPI:
    """``serving``: the app is ``tapgate serve``'s, alone in its process (it then tunes the process)."""
    return create_app(
        build_gateway(settings, store, clock, push, reload_on_sighup),
        max_body_bytes=settings.max_body_bytes,
        mcp_wait=settings.mcp_wait_seconds,
        web_push_key=web_push_key(settings),
        max_streams_per_credential=settings.max_streams_per_credential,
        settle_heap=serving,
        bypasses_off=bypasses_off(),
    )


# The faster paths beside the framework's and the drivers' own, each of which a process can leave out
# (TAPGATE_BYPASS_OFF=name,…): the bench measures what each buys, and the tests check that a server
# without it answers as one with it. Not a setting: an operator has no reason to turn one off.
BYPASSES = {
    "link": "the device link served ahead of the middleware",
    "ahead": "the planned routes served ahead of the middleware",
    "light_http": "uvicorn's HTTP protocol holding less for a request that waits",
    "light_ws": "uvicorn's WebSocket protocol holding less for an idle link",
    "raw_sql": "the hot statements run on sqlite3, not through SQLAlchemy (SQLite)",
}
BYPASS_OFF = "TAPGATE_BYPASS_OFF"


def bypasses_off() -> frozenset[str]:
    """The bypasses TAPGATE_BYPASS_OFF names (a comma-separated list; empty or unset: none)."""
    import os

    names = frozenset(n.strip() for n in os.environ.get(BYPASS_OFF, "").split(",") if n.strip())
    unknown = sorted(names - BYPASSES.keys())
    if unknown:
        raise ConfigurationError(
            f"{BYPASS_OFF} names {', '.join(unknown)}, which tapgate does not know; "
            f"use some of {', '.join(BYPASSES)}."
        )
    return names


def app_from_environment() -> FastAPI:
    """The uvicorn factory used by ``tapgate serve``: settings from TAPGATE_CONFIG and TAPGATE_*."""
    import logging
    import os

    from tapgate import faults
    from tapgate.api.bounded_http import BoundedHttp
    from tapgate.config import load_settings
    from tapgate.logs import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level)
    faults.arm_from(os.environ)
    BoundedHttp.bound(
        settings.max_header_bytes,
        settings.header_timeout_seconds,
        settings.body_timeout_seconds,
        settings.max_connections,
    )
    logging.getLogger("tapgate.limits").info(
        "limits",
        extra={
            "max_header_bytes": settings.max_header_bytes,
            "header_timeout_seconds": settings.header_timeout_seconds,
            "body_timeout_seconds": settings.body_timeout_seconds,
            "max_connections": settings.max_connections,
            "ws_max_frame_bytes": settings.ws_max_frame_bytes,
            "max_streams_per_credential": settings.max_streams_per_credential,
            "max_body_bytes": settings.max_body_bytes,
        },
    )
    return build_app(settings, reload_on_sighup=True, serving=True)
