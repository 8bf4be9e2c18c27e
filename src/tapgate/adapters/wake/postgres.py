"""PostgreSQL LISTEN/NOTIFY: a notification committed in any process wakes waiters in this one.

Units of work send ``pg_notify('tapgate_wake', origin + ' ' + key)`` inside their transaction, so a
notification is delivered exactly when the change it announces is visible. One connection per process
listens and feeds the local waiters; if it drops, it reconnects with back-off and wakes every waiter once,
so nobody sleeps through what happened while it was away. ``origin`` names the sending process: the
listener skips its own process's notifications, whose waiters were woken at commit already (a second wake
a moment later would have each of them read again). asyncpg is imported when the listener starts: a
process on SQLite never loads it (2.8 MiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tapgate import tasks
from tapgate.adapters.wake.local import LocalWake

CHANNEL = "tapgate_wake"
log = logging.getLogger(__name__)


class PostgresListener:
    def __init__(self, dsn: str, wake: LocalWake, origin: str = "") -> None:
        self._dsn = dsn
        self._wake = wake
        self._origin = origin  # this process's notifications (the store's origin): skipped
        self._task: asyncio.Task[None] | None = None
        self.connected: asyncio.Event = asyncio.Event()

    async def start(self) -> None:
        self.connected = asyncio.Event()  # bound to the loop that runs the gateway
        self._task = asyncio.create_task(self._run(), name="tapgate-listen")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.connected.wait(), timeout=10)

    async def close(self) -> None:
        await tasks.stop(self._task)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        origin, _, key = payload.partition(" ")
        if origin != self._origin:
            self._wake.notify(key or origin)  # a payload without an origin is a bare key

    async def _run(self) -> None:
        import asyncpg  # here, not at the top: see the module's docstring

        delay = 0.1
        while True:
            lost = asyncio.Event()
            try:
                conn = await asyncpg.connect(self._dsn, timeout=10)
            except (OSError, asyncpg.PostgresError) as e:
                self._wake.degraded = True
                log.warning("listen connection failed", extra={"error": type(e).__name__, "retry_in": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            try:
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, self._on_notify)
                delay = 0.1
                self.connected.set()
                self._wake.degraded = False
                self._wake.notify_all()  # whatever happened while we were not listening
                await lost.wait()
                log.warning("listen connection lost; reconnecting")
            finally:
                self.connected.clear()
                self._wake.degraded = True
                with contextlib.suppress(Exception):
                    await conn.close(timeout=1)
