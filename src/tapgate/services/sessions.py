"""Sessions: what the agent runtime tells tapgate about a conversation (kind, attended, devices)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tapgate.domain.devices import PHONE_ACTIONS, DeviceStatus
from tapgate.domain.errors import InvalidInput, NotFound
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.sessions import Session, SessionKind, check_message_capabilities, check_session_id
from tapgate.ports import Clock, Store
from tapgate.services.tools import announce_change


def _agent(caller: Principal) -> str:
    caller.require(TokenKind.AGENT, scope=Scope.TOOLS)
    assert caller.user_id is not None
    return caller.user_id


async def put(
    store: Store, clock: Clock, caller: Principal, session_id: str, kind: str, attended: bool
) -> Session:
    """Create or update a session of the agent's user. Raises InvalidInput, NotFound, Forbidden."""
    user_id = _agent(caller)
    check_session_id(session_id)
    if kind not in (SessionKind.CHAT, SessionKind.SCHEDULE, SessionKind.SUBAGENT):
        raise InvalidInput(
            "kind", "kind must be chat, schedule or subagent; triage sessions are tapgate's own."
        )
    now = clock.now()
    async with store.unit_of_work(caller.tenant_id) as uow:
        existing = await uow.sessions.get(user_id, session_id)
        if existing is not None and existing.agent_id != caller.agent_id:
            raise NotFound(f"There is no session {session_id!r} of this agent.")
        if existing is not None and existing.kind is SessionKind.TRIAGE:
            raise InvalidInput("kind", "A triage session keeps its kind.")
        session = (
            replace(existing, kind=SessionKind(kind), attended=attended, updated_at=now)
            if existing
            else Session(
                caller.tenant_id,
                user_id,
                session_id,
                caller.agent_id or "",
                SessionKind(kind),
                attended,
                now,
                now,
            )
        )
        await uow.sessions.save(session)
    return session


async def record_message(
    store: Store,
    clock: Clock,
    caller: Principal,
    session_id: str,
    device_id: str | None,
    capabilities: Sequence[str],
) -> Session:
    """Record which device a message came from and what it could do (never the message's text).

    Raises NotFound (no such session), InvalidInput (unknown device, bad capability names).
    """
    user_id = _agent(caller)
    names = check_message_capabilities(capabilities)
    now = clock.now()
    async with store.unit_of_work(caller.tenant_id) as uow:
        session = await uow.sessions.get(user_id, session_id)
        if session is None or session.agent_id not in ("", caller.agent_id):
            raise NotFound(
                f"There is no session {session_id!r}; create it with PUT /v1/sessions/{{id}} first."
            )
        device_uid = None
        if device_id is not None:
            device = await uow.devices.get(user_id, device_id)
            if device is None or device.status is not DeviceStatus.ACTIVE:
                raise InvalidInput("device_id", f"device_id: the user has no active device {device_id!r}.")
            device_uid = device.device_uid
        elif PHONE_ACTIONS in names:
            raise InvalidInput("device_id", "device_id is required when the message offers phone_actions.")
        phone = device_uid if PHONE_ACTIONS in names else session.phone_device_uid
        if phone != session.phone_device_uid:  # phone_action now acts on another phone, or appears
            await announce_change(uow, user_id, "session", now, session_id=session_id)
        session = replace(
            session,
            latest_device_uid=device_uid,
            latest_capabilities=names,
            phone_device_uid=phone,
            updated_at=now,
        )
        await uow.sessions.add_message(session, device_uid, names, now)
        await uow.sessions.save(session)
    return session
