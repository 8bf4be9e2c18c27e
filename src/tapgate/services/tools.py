"""Tools: what an agent may call on its user's devices, listed and resolved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tapgate.domain import phone_action
from tapgate.domain.devices import PHONE_ACTIONS, Capability, Device, DeviceStatus
from tapgate.domain.errors import NotFound
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.tools import ToolFormat, device_tool, phone_action_tool
from tapgate.ports import Store, UnitOfWork


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
        if capability.name != PHONE_ACTIONS
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
    if device is None or device.status is not DeviceStatus.ACTIVE:
        return None
    declared = device.declared(PHONE_ACTIONS)
    return device if declared is not None and declared.granted else None
