"""Tools: what an agent may call on its user's devices, listed and resolved."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tapgate.domain import phone_action
from tapgate.domain.devices import PHONE_ACTIONS, Capability, Declared, Device, DeviceStatus
from tapgate.domain.errors import NotFound
from tapgate.domain.events import TOOLS_CHANGED
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.tools import ToolFormat, device_tool, phone_action_tool
from tapgate.ports import Store, UnitOfWork
from tapgate.services.context import Context, events_key, tools_key
from tapgate.services.waiting import sleep_until_woken


@dataclass(frozen=True, slots=True)
class Resolved:
    device: Device
    capability: Capability


async def list_tools(
    store: Store, caller: Principal, session_id: str | None, format: ToolFormat, enabled: bool
) -> list[dict[str, Any]]:
    """One definition per granted capability of each active device of the agent's user, and the
    ``phone_action`` session tool once the session offered it. Empty with the device flags off."""
    caller.require(TokenKind.AGENT, scope=Scope.TOOLS)
    assert caller.user_id is not None
    async with store.unit_of_work(caller.tenant_id) as uow:
        session = await uow.sessions.get(caller.user_id, session_id) if session_id else None
        if session_id and (session is None or session.agent_id not in ("", caller.agent_id)):
            raise NotFound(f"There is no session {session_id!r}.")
        if not enabled:
            return []
        devices = [d for d in await uow.devices.list(caller.user_id) if d.status is DeviceStatus.ACTIVE]
        phone = await _phone(uow, session.phone_device_uid) if session else None
    tools = [
        device_tool(device, capability, format)
        for device in devices
        for capability in device.granted()
        if capability.device_tool
    ]
    if (
        phone is not None
        and session is not None
        and phone_action.is_offered([PHONE_ACTIONS], session.kind.value)
    ):
        tools.append(phone_action_tool(format))
    return tools


async def _phone(uow: UnitOfWork, device_uid: str | None) -> Device | None:
    """The session's phone, while it is active and phone_actions is granted on it."""
    if device_uid is None:
        return None
    device = await uow.devices.by_uid(device_uid)
    return device if device is not None and device.may_run(PHONE_ACTIONS) else None


def visible(capabilities: Sequence[Declared]) -> list[Capability]:
    """What of a device's capabilities an agent can see: the granted ones that face agents (not
    ``approvals``)."""
    return [d.capability for d in capabilities if d.granted and d.capability.agent_facing]


async def announce_change(
    uow: UnitOfWork, user_id: str, change: str, now: datetime, *, device_id: str = "", session_id: str = ""
) -> None:
    """Tell the user's agents that their tool list may have changed: a ``tools.changed`` event (ids and
    a fixed word, no text) and a wake-up for the MCP sessions watching the list."""
    data = {"change": change} | ({"device_id": device_id} if device_id else {})
    data |= {"session_id": session_id} if session_id else {}
    await uow.events.append(user_id, TOOLS_CHANGED, data, now)
    uow.notify(tools_key(uow.tenant_id, user_id))
    uow.notify(events_key(uow.tenant_id, user_id))


async def changes(
    ctx: Context, caller: Principal, session_id: str | None, format: ToolFormat, idle: float = 30.0
) -> AsyncIterator[list[dict[str, Any]]]:
    """The caller's tool list now, then again each time it differs from the one before.

    A wake-up only makes it list again, so a change that leaves the list as it was says nothing, and a
    missed notification (while the wake is degraded) is caught on the poll interval. Raises NotFound
    for an unknown session, Forbidden without the ``tools`` scope.
    """
    assert caller.user_id is not None
    with ctx.wake.subscribe(tools_key(caller.tenant_id, caller.user_id)) as woken:
        last = await list_tools(ctx.store, caller, session_id, format, ctx.device_channel)
        yield last
        while True:
            await sleep_until_woken(ctx, woken, idle)
            if not woken.is_set() and not ctx.wake.degraded:
                continue
            woken.clear()
            current = await list_tools(ctx.store, caller, session_id, format, ctx.device_channel)
            if current != last:
                last = current
                yield current
