"""Know when a token that a held request (a long-poll, an event stream, a waiting call) carries stops
being valid: revoked, in any process, or expired.

A watch costs no task while nothing happens. It is a subscription to the token's tenant's auth
notification and one timer (the token's expiry, or a recheck every few minutes); either starts one check,
which reads the token (from the auth cache when it can) and re-arms the timer, or reports the lapse. A
notification that comes while a check is reading starts another check after it, so a revocation announced
mid-read is never lost to a stale read. A watcher per held request used to be a task of its own, waiting:
a share of a waiting call's CPU, and memory for every held long-poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any

from tapgate.domain.errors import StorageError, Unauthenticated
from tapgate.domain.principals import Principal
from tapgate.domain.tokens import parse_token
from tapgate.ports import Woken
from tapgate.services.context import Context, auth_key
from tapgate.services.waiting import wait_slice

log = logging.getLogger(__name__)
IDLE_RECHECK_SECONDS = 300.0  # a held token is re-read this often even when nothing was notified


class _Nudge:
    """What the watch subscribes with: setting it calls back, so that no task waits on it."""

    __slots__ = ("_callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback

    def set(self) -> None:
        self._callback()


class TokenWatch:
    """Calls ``lapsed`` once when ``token`` stops being valid, between ``start`` and ``close``."""

    def __init__(
        self,
        ctx: Context,
        authenticate: Callable[[str], Awaitable[Principal]],
        token: str,
        lapsed: Callable[[], None],
    ) -> None:
        self._ctx = ctx
        self._authenticate = authenticate
        self._token = token
        self._lapsed = lapsed
        self._subscription: AbstractContextManager[Woken] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._checker: asyncio.Task[None] | None = None
        self._due = False  # a check is asked for
        self._checking = False
        self._closed = False

    async def start(self) -> None:
        """Subscribe, then check once in the caller's own task (a cache hit does not suspend it)."""
        try:
            tenant = parse_token(self._token).tenant_id
        except Unauthenticated:
            return  # not a token at all: the request answers 401 itself, and nothing is held
        subscription = self._ctx.wake.subscribe(auth_key(tenant), also=_Nudge(self._nudge))
        subscription.__enter__()
        self._subscription = subscription
        self._due = True
        await self._checks()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._checker is not None and self._checker is not asyncio.current_task():
            self._checker.cancel()
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.__exit__(None, None, None)

    async def __aenter__(self) -> TokenWatch:
        await self.start()
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """``close``, and wait for a check it stopped to end (its read gives its connection back first)."""
        checker = self._checker
        self.close()
        if checker is not None and checker is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(checker, return_exceptions=True)

    def _nudge(self) -> None:
        if self._closed:
            return
        self._due = True
        if not self._checking:
            self._checking = True  # at once: a second nudge before the task runs starts no second task
            self._checker = asyncio.get_running_loop().create_task(self._checks())

    async def _checks(self) -> None:
        self._checking = True
        try:
            while self._due and not self._closed:
                self._due = False
                try:
                    await self._check()
                except Exception as e:  # a check that failed says nothing about the token: look again soon
                    log.warning("token watch failed", extra={"error": type(e).__name__})
                    self._arm(self._ctx.limits.invocation_poll_seconds)
        finally:
            self._checking = False

    async def _check(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            principal: Principal | None = await self._authenticate(self._token)
        except Unauthenticated:
            self._lapse()
            return
        except StorageError:
            principal = None  # the database is away: keep the request, look again shortly
        left = IDLE_RECHECK_SECONDS
        if principal is None:
            left = self._ctx.limits.invocation_poll_seconds
        elif principal.expires_at is not None:
            left = min(left, (principal.expires_at - self._ctx.clock.now()).total_seconds())
            if left <= 0:
                self._lapse()
                return
        self._arm(left)

    def _arm(self, seconds: float) -> None:
        if not self._closed:
            self._timer = asyncio.get_running_loop().call_later(wait_slice(self._ctx, seconds), self._nudge)

    def _lapse(self) -> None:
        if not self._closed:
            self.close()
            self._lapsed()
