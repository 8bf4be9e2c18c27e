"""The agent runtime's event stream: durable, in order, resumable from any sequence number."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tapgate.domain.events import Event
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.services.context import Context, events_key
from tapgate.services.waiting import sleep_until_woken

PAGE = 100


async def stream(
    ctx: Context, caller: Principal, after: int, idle: float = 15.0
) -> AsyncIterator[Event | None]:
    """The user's events after ``after``, then new ones as they commit; None after ``idle`` seconds
    without one (the edge sends a keep-alive). Raises Forbidden without the ``events`` scope."""
    caller.require(TokenKind.AGENT, scope=Scope.EVENTS)
    assert caller.user_id is not None
    with ctx.wake.subscribe(events_key(caller.tenant_id, caller.user_id)) as woken:
        while True:
            woken.clear()
            async with ctx.store.unit_of_work(caller.tenant_id) as uow:
                page = await uow.events.read(caller.user_id, after, PAGE)
            for event in page:
                after = event.seq
                yield event
            if len(page) == PAGE:
                continue
            if not await sleep_until_woken(ctx, woken, idle) and not ctx.wake.degraded:
                yield None


async def read(ctx: Context, caller: Principal, after: int, limit: int = PAGE) -> list[Event]:
    caller.require(TokenKind.AGENT, scope=Scope.EVENTS)
    assert caller.user_id is not None
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        return list(await uow.events.read(caller.user_id, after, limit))
