"""Explain a call's policy verdict against the live database, creating nothing (``tapgate policy explain``).

The call is resolved as the check chain resolves it (DESIGN §3.3 steps 2-5): the user's device and its
capability, the person's grant, then the rules in force in this process. A step before policy that would
refuse the call is reported as the verdict, since the rules would never be asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from tapgate.domain.devices import PHONE_ACTIONS, Device, DeviceStatus
from tapgate.domain.errors import InvalidInput, NotFound
from tapgate.domain.policy import UNTRUSTED, PolicyRequest
from tapgate.domain.policy_explain import Explanation, explain
from tapgate.domain.sessions import SessionKind
from tapgate.domain.tools import PHONE_ACTION, ToolName
from tapgate.services.context import Context


@dataclass(frozen=True, slots=True)
class Explained:
    """``refused`` names a check before policy that refuses the call; then ``explanation`` is None."""

    request: PolicyRequest | None
    device: Device | None
    refused: str = ""
    explanation: Explanation | None = None


async def explain_call(
    ctx: Context,
    tenant_id: str,
    user_id: str,
    tool: str,
    origin: str = "owner",
    session_kind: str = "",
    agent_id: str = "",
) -> Explained:
    """Raises NotFound for an unknown tenant or user, InvalidInput for an origin or session kind that
    no call can have."""
    if origin not in ("owner", UNTRUSTED):
        raise InvalidInput("origin", "--origin must be owner or untrusted.")
    kinds = [k.value for k in SessionKind]
    if session_kind and session_kind not in kinds:
        raise InvalidInput("session_kind", f"--session-kind must be one of {', '.join(kinds)}.")
    async with ctx.store.unit_of_work(tenant_id) as uow:
        if await uow.tenants.get() is None:
            raise NotFound(f"There is no tenant {tenant_id!r}.")
        if await uow.users.get(user_id) is None:
            raise NotFound(f"Tenant {tenant_id!r} has no user {user_id!r}.")
        devices = list(await uow.devices.list(user_id))
    if not ctx.device_channel:
        return Explained(None, None, "the device channel is off on this gateway")
    device, capability = _resolve(devices, tool)
    if device is None:
        return Explained(None, None, f"unknown tool: {user_id} has no active device serving {tool}")
    declared = device.declared(capability)
    assert declared is not None
    if not declared.granted:
        return Explained(None, device, f"the person has not granted {capability} on {device.device_id}")
    if session_kind == SessionKind.TRIAGE.value:
        origin = UNTRUSTED  # the chain treats every call of a triage session as untrusted
    request = PolicyRequest(
        tool=tool,
        device_id=device.device_id,
        capability=PHONE_ACTION if capability == PHONE_ACTIONS else capability,
        capability_kind=declared.capability.kind.value,
        agent_id=agent_id,
        session_kind=session_kind,
        origin=origin,
    )
    return Explained(request, device, explanation=explain(ctx.policies, request))


def _resolve(devices: list[Device], tool: str) -> tuple[Device | None, str]:
    active = [d for d in devices if d.status is DeviceStatus.ACTIVE]
    if tool == PHONE_ACTION:
        phones = [d for d in active if d.declared(PHONE_ACTIONS) is not None]
        return (phones[0], PHONE_ACTIONS) if phones else (None, "")
    try:
        name = ToolName.parse(tool)
    except InvalidInput:
        return None, ""
    for device in active:
        if (
            device.device_id == name.device_id
            and (declared := device.declared(name.capability)) is not None
            and declared.capability.device_tool
        ):
            return device, name.capability
    return None, ""
