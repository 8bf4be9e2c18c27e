"""Wakes over a NATS broker: a notification committed in any process wakes waiters in every other one.

No NOTIFY is issued in the database. After a unit of work commits, the store calls ``notify`` for each
key: the waiters of this process wake at once and the key is published on ``tapgate.wake.<tenant>.<kind>``
(core NATS, at most once). Every gateway subscribes to ``tapgate.wake.>`` and wakes its own waiters.

The row is the truth and a woken waiter re-reads it, so a wake may be lost without losing anything but
time: every ``poll_seconds`` a sweep wakes every waiter but device long-polls and live links (they
subscribe unswept: a call a live link has not taken goes out as a push, and a long-poll returns within
its own wait), so an idle link costs nothing. While the connection is down the wake is ``degraded`` and
fails safe: the auth cache is bypassed, waiters re-read on the poll interval, and the sweep wakes every
waiter, links and device long-polls included, so each re-checks its credential and a device revoked
through another gateway meanwhile is closed within ``poll_seconds``. nats-py reconnects by itself, and on
reconnection every waiter and listener is told that anything may have changed. A connection that dies
without a close reaching either end is noticed by its pings, about three poll intervals later.

The server's credentials (user and password, a token or an NKey seed) and TLS (a CA, a client
certificate) are ``NatsCredentials``; none of them reaches a message or a log line. The connection is
checked at start: :func:`check_reachable` raises ConfigurationError naming ``nats_url``, in one line that
says whether the server is not there, refused the credentials, or failed the TLS handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import SlowConsumerError

from tapgate import tasks
from tapgate.adapters.wake.local import LocalWake
from tapgate.domain.errors import ConfigurationError

PREFIX = "tapgate.wake"
CONNECT_SECONDS = 3.0
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
log = logging.getLogger(__name__)


def subject(key: str) -> str:
    """``<tenant>:<kind>:<id>`` → ``tapgate.wake.<tenant>.<kind>`` (a key without a tenant: ``_``)."""
    parts = key.split(":")
    tenant, kind = (parts[0], parts[1]) if len(parts) >= 2 else ("_", parts[0])
    return f"{PREFIX}.{_token(tenant)}.{_token(kind)}"


def _token(text: str) -> str:
    # A subject token may not hold '.', '*', '>' or white space: anything unusual is sent as hex.
    return text if _TOKEN.fullmatch(text) else "x" + text.encode().hex()[:62]


def shown(url: str) -> str:
    """``url`` without a user or password, for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}:{parts.port}" if parts.port else f"{parts.scheme}://{host}"


@dataclass(frozen=True)
class NatsCredentials:
    """How tapgate proves itself to the NATS server and the TLS it speaks (empty: none). The secrets are
    left out of its ``repr``."""

    user: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    nkey_seed_file: str = ""  # a file holding the NKey's seed (SU...)
    tls_ca_file: str = ""  # the CA that signed the server's certificate (else the system's CAs)
    tls_cert_file: str = ""  # a client certificate, for a server that verifies its clients
    tls_key_file: str = ""

    def options(self, url: str) -> dict[str, Any]:
        """The keyword arguments of nats-py's ``connect`` for these credentials. Raises
        ConfigurationError when a TLS file cannot be loaded."""
        options: dict[str, Any] = {}
        if self.user:
            options["user"], options["password"] = self.user, self.password
        if self.token:
            options["token"] = self.token
        if self.nkey_seed_file:
            if not os.access(self.nkey_seed_file, os.R_OK):
                raise ConfigurationError(
                    f"nats_nkey_seed_file {self.nkey_seed_file} cannot be read; check its path and rights."
                )
            options["nkeys_seed"] = self.nkey_seed_file
        if self.tls_ca_file or self.tls_cert_file or url.startswith("tls://"):
            try:
                context = ssl.create_default_context(cafile=self.tls_ca_file or None)
                if self.tls_cert_file:
                    context.load_cert_chain(self.tls_cert_file, self.tls_key_file or None)
            except (OSError, ssl.SSLError) as e:
                raise ConfigurationError(
                    "nats_tls_ca_file, nats_tls_cert_file or nats_tls_key_file cannot be loaded "
                    f"({type(e).__name__}); check that each is a readable PEM file."
                ) from None
            options["tls"] = context
        return options


def _refusal(url: str, e: BaseException, seen: Sequence[BaseException]) -> ConfigurationError:
    """Why the first connection failed, in one line: what the server said, else what the socket did."""
    where = f"The NATS server at nats_url {shown(url)}"
    said = [str(x).lower() for x in seen]
    if any("authorization" in x or "authentication" in x for x in said):
        return ConfigurationError(
            f"{where} refused tapgate's credentials; check nats_user and nats_password, nats_token or "
            "nats_nkey_seed_file."
        )
    tls = next((x for x in (e, *seen) if isinstance(x, ssl.SSLError)), None)
    if tls is not None:
        return ConfigurationError(
            f"{where} failed the TLS handshake ({type(tls).__name__}); check nats_tls_ca_file, "
            "nats_tls_cert_file and nats_tls_key_file."
        )
    return ConfigurationError(
        f"{where} cannot be reached ({type(e).__name__}); start it, or set "
        'wake = "postgres" (or "local" for one process).'
    )


async def check_reachable(url: str, credentials: NatsCredentials | None = None) -> None:
    """Raise ConfigurationError now, before serving, if no NATS server answers at ``url`` or it refuses
    ``credentials``."""
    nc = Client()
    try:
        await _connect_once(nc, url, credentials, name="tapgate-check")
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


async def _ignore(_e: Exception) -> None:
    return None


async def _connect_once(
    nc: Client, url: str, credentials: NatsCredentials | None = None, **options: Any
) -> None:
    """Connect within CONNECT_SECONDS or raise ConfigurationError saying why: a first connection that
    fails is not retried (nats-py would otherwise keep trying for minutes)."""
    seen: list[BaseException] = []
    report: Callable[[Exception], Awaitable[None]] = options.pop("error_cb", _ignore)

    async def noted(e: Exception) -> None:
        if len(seen) < 8:
            seen.append(e)
        await report(e)

    try:
        await asyncio.wait_for(
            nc.connect(
                url,
                connect_timeout=int(CONNECT_SECONDS),
                max_reconnect_attempts=1,
                reconnect_time_wait=0.1,  # type: ignore[arg-type]
                error_cb=noted,
                **(credentials or NatsCredentials()).options(url),
                **options,
            ),
            timeout=CONNECT_SECONDS * 2,
        )
    except (OSError, NatsError, TimeoutError) as e:
        raise _refusal(url, e, seen) from None


class NatsWake(LocalWake):
    """The Wake port over NATS; also a background service of the gateway (``start``/``close``)."""

    def __init__(self, url: str, poll_seconds: float, credentials: NatsCredentials | None = None) -> None:
        super().__init__()
        self.url = url
        self.credentials = credentials or NatsCredentials()
        self.poll_seconds = poll_seconds
        self._nc: Client | None = None
        self._outgoing: asyncio.Queue[str] | None = None
        # Keys notified before start (a command that never starts us), each once: bounded by the keys.
        self._unsent: dict[str, None] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._lost = False
        self._failing = False  # a publish failed and none has succeeded since
        self.published = 0  # keys sent and received, for the bench
        self.received = 0

    def notify(self, key: str) -> None:
        super().notify(key)
        self._send(key)

    def hand(self, key: str, values: Sequence[object]) -> None:
        super().hand(key, values)
        self._send(key)

    def _send(self, key: str) -> None:
        if self._outgoing is not None:
            self._outgoing.put_nowait(key)
        else:
            self._unsent[key] = None

    async def start(self) -> None:
        """Connect, subscribe and start publishing and sweeping. Raises ConfigurationError if the
        server cannot be reached now."""
        nc = Client()
        await _connect_once(
            nc,
            self.url,
            self.credentials,
            name="tapgate-wake",
            no_echo=True,  # this process's own wakes were delivered here already
            # A connection that dies without a close reaching us (a cut cable, a dropped route) is
            # noticed when its pings go unanswered: on the sweep's scale, not nats-py's two minutes.
            ping_interval=max(1, math.ceil(self.poll_seconds)),
            max_outstanding_pings=2,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
        )
        # Connected once: from now on nats-py reconnects by itself, for as long as we run.
        nc.options["allow_reconnect"] = True
        nc.options["max_reconnect_attempts"] = -1
        nc.options["reconnect_time_wait"] = 1
        await nc.subscribe(f"{PREFIX}.>", cb=self._on_message)
        await nc.flush(timeout=int(CONNECT_SECONDS))  # subscribed at the server before we serve
        self._nc = nc
        self._outgoing = asyncio.Queue()
        for key in self._unsent:
            self._outgoing.put_nowait(key)
        self._unsent.clear()
        self._tasks = [
            asyncio.create_task(self._publish(), name="tapgate-wake-publish"),
            asyncio.create_task(self._sweep(), name="tapgate-wake-sweep"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            await tasks.stop(task)
        self._tasks = []
        if self._nc is not None and self._outgoing is not None:
            while not self._outgoing.empty():  # what committed before the stop still goes out
                with contextlib.suppress(OSError, NatsError):
                    key = self._outgoing.get_nowait()
                    await self._nc.publish(subject(key), key.encode())
        if self._nc is None and self._unsent:
            await self._send_once()  # a command's changes (a revoked device, a new tenant) reach the servers
        if self._nc is not None:
            nc, self._nc = self._nc, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.drain(), timeout=CONNECT_SECONDS)
            with contextlib.suppress(Exception):
                await nc.close()
        self._outgoing = None

    async def _send_once(self) -> None:
        nc = Client()
        try:
            await _connect_once(nc, self.url, self.credentials, name="tapgate-command")
            for key in self._unsent:
                await nc.publish(subject(key), key.encode())
            await nc.flush(timeout=int(CONNECT_SECONDS))
        except (ConfigurationError, OSError, NatsError, TimeoutError) as e:
            # The servers' sweep and caches' lifetimes still catch up; say so once.
            log.warning("wake not published", extra={"error": type(e).__name__, "keys": len(self._unsent)})
        finally:
            self._unsent.clear()
            with contextlib.suppress(Exception):
                await nc.close()

    async def _publish(self) -> None:
        assert self._outgoing is not None and self._nc is not None
        queue, nc = self._outgoing, self._nc
        while True:
            key = await queue.get()
            try:
                await nc.publish(subject(key), key.encode())
                self.published += 1
                self._failing = False
            except (OSError, NatsError) as e:
                # Lost: the receivers' sweep recovers it. Logged once until a publish succeeds again.
                if not self._failing and not self._lost:
                    log.warning("wake publish failed", extra={"error": type(e).__name__})
                self._failing = True

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            if self.degraded:  # a revocation may be missed: every link and long-poll re-checks too
                self.wake_waiters(unswept=True)
            else:
                self.wake_waiters(but=lambda key: ":device:" in key)

    async def _on_message(self, msg: Msg) -> None:
        self.received += 1
        LocalWake.notify(self, msg.data.decode(errors="replace"))

    async def _on_error(self, e: Exception) -> None:
        if isinstance(e, SlowConsumerError):
            self.notify_all()  # wakes were dropped: every waiter re-reads
            return
        if not self._lost:
            log.debug("nats error", extra={"error": type(e).__name__})

    async def _on_disconnected(self) -> None:
        if self._nc is None:  # closing
            return
        self.degraded = True
        if not self._lost:
            self._lost = True
            log.warning("nats connection lost; serving on the sweep", extra={"url": shown(self.url)})

    async def _on_reconnected(self) -> None:
        self.degraded = False
        if self._lost:
            self._lost = False
            log.warning("nats connection back", extra={"url": shown(self.url)})
        self.notify_all()  # whatever happened while we were away: every waiter re-reads
