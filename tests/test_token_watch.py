"""A held request's token watch (services/token_watch.py): it reports a revocation or an expiry once,
and while nothing happens it costs no task, however many requests are held."""

from __future__ import annotations

import asyncio

from tapgate.adapters.clock import FrozenClock
from tapgate.adapters.store.memory import MemoryStore
from tapgate.bootstrap import build_gateway
from tapgate.config import Settings
from tapgate.domain.principals import Principal, TokenKind
from tapgate.gateway import Gateway

BOUND = 30.0  # seconds: only a broken watch waits this long


async def _operator(gateway: Gateway) -> Principal:
    return await gateway.authenticate((await gateway.create_tenant("acme")).token)


async def _agent_token(
    gateway: Gateway, operator: Principal, user: str, expires_in_seconds: int | None = None
) -> tuple[str, str]:
    await gateway.create_user(operator, user, None)
    agent = await gateway.create_token(
        operator, user, TokenKind.AGENT, agent_id="helper", expires_in_seconds=expires_in_seconds
    )
    return agent.token, agent.credential_id


def _gateway(clock: FrozenClock) -> Gateway:
    return build_gateway(Settings(database_url="sqlite://"), store=MemoryStore(), clock=clock)


async def test_a_revocation_is_reported_once_and_a_hundred_idle_watches_hold_no_task() -> None:
    clock = FrozenClock()
    gateway = _gateway(clock)
    operator = await _operator(gateway)
    token, token_id = await _agent_token(gateway, operator, "ana")
    other, _ = await _agent_token(gateway, operator, "bob")
    lapses: list[str] = []
    revoked = asyncio.Event()

    def lapsed(name: str) -> None:
        lapses.append(name)
        revoked.set()

    tasks_before = len(asyncio.all_tasks())
    watches = [gateway.watch_token(token, lambda: lapsed("held")) for _ in range(100)]
    watches.append(gateway.watch_token(other, lambda: lapsed("other")))
    for watch in watches:
        await watch.start()
    assert len(asyncio.all_tasks()) == tasks_before  # held, and nothing waits in a task
    await gateway.revoke_token(operator, token_id)
    async with asyncio.timeout(BOUND):
        while len(lapses) < 100:
            await revoked.wait()
            revoked.clear()
    assert lapses == ["held"] * 100  # each of the revoked token's watches once; the other token's none
    for watch in watches:
        watch.close()
    await gateway.close()


async def test_an_expiry_is_reported_when_its_time_comes() -> None:
    clock = FrozenClock()
    gateway = _gateway(clock)
    token, _ = await _agent_token(gateway, await _operator(gateway), "ana", expires_in_seconds=1)
    expired = asyncio.Event()
    async with gateway.watch_token(token, expired.set):
        clock.advance(2)  # the watch's timer (one second) finds the token expired on the gateway's clock
        async with asyncio.timeout(BOUND):
            await expired.wait()
    await gateway.close()
