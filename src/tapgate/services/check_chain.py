"""The check chain's reads: what the store holds for a call, read once, before the checks of
``domain/check_chain.py`` decide. ``invoke`` and ``tapgate policy explain`` both come through here."""

from __future__ import annotations

from datetime import datetime

from tapgate.domain.check_chain import (
    Passed,
    Read,
    Refusal,
    Request,
    check,
    guess_tool,
    tool_name,
    unknown_tool,
)
from tapgate.domain.console import ALL_AGENTS
from tapgate.domain.policy import PolicySet
from tapgate.domain.tools import PHONE_ACTION
from tapgate.ports import UnitOfWork


async def read(uow: UnitOfWork, user_id: str, request: Request, channel_on: bool) -> Read:
    """The device the tool names with the person's pauses (of every agent, and of this one), the
    call's session, and whether a device that is gone ever existed: in one statement for a device
    tool and a call without a session."""
    if not channel_on:
        return Read(channel_on)
    session = await uow.sessions.get(user_id, request.session_id) if request.session_id else None
    name = tool_name(request.tool)
    if name is not None:
        device, paused, agent_paused = await uow.devices.get_with_pause(
            user_id, name.device_id, request.agent_id
        )
        ever = device is None and await uow.devices.ever(user_id, name.device_id)
        return Read(channel_on, paused, agent_paused, session, device, ever)
    paused = await uow.pauses.paused_until(user_id, ALL_AGENTS)
    own = session is not None and session.agent_id in ("", request.agent_id)
    if request.tool != PHONE_ACTION or not own or session is None or not session.phone_device_uid:
        return Read(channel_on, paused, None, session)
    device = await uow.devices.by_uid(session.phone_device_uid)
    agent_paused = await uow.pauses.paused_until(user_id, request.agent_id)
    return Read(channel_on, paused, agent_paused, session, device)


async def through(
    uow: UnitOfWork,
    policies: PolicySet,
    user_id: str,
    request: Request,
    channel_on: bool,
    now: datetime,
) -> tuple[Read, Passed]:
    """Read, then run steps 1-5. Raises Refusal; an unknown tool's names the tool of this person's it
    is most likely a typo of (read only then)."""
    found = await read(uow, user_id, request, channel_on)
    try:
        return found, check(policies, found, request, now)
    except Refusal as refusal:
        if not unknown_tool(refusal):
            raise
        raise guess_tool(refusal, request.tool, await uow.devices.list(user_id)) from None
