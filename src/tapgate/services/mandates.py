"""Standing mandates: an agent asks, the person signs the bounds once on a device that approves for them,
and calls inside the bounds then go through without an approval each, until the mandate is spent,
expires or is revoked. A revoked mandate is read from the store on every call, so no process uses it
after the revocation commits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tapgate.domain.approvals import Decision, action_sha256, new_sign_block
from tapgate.domain.audit import AuditRecord
from tapgate.domain.check_chain import Request, covering
from tapgate.domain.devices import Capability, Device, DeviceStatus
from tapgate.domain.errors import Conflict, Forbidden, MalformedRequest, NotFound
from tapgate.domain.events import APPROVAL_REQUESTED
from tapgate.domain.ids import new_id
from tapgate.domain.inbox import Approval, ApprovalStatus, binding_code, who_asks
from tapgate.domain.mandates import (
    MANDATE,
    Mandate,
    MandateStatus,
    canonical,
    check_bounds,
    preview,
    summary,
)
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.tools import ToolName
from tapgate.ports import UnitOfWork
from tapgate.services.context import Context, events_key, inbox_key
from tapgate.services.decisions import record_decision
from tapgate.services.outbox import queue_push

MANDATE_REQUESTED = "mandate.requested"
MANDATE_ACTIVE = "mandate.active"
MANDATE_DENIED = "mandate.denied"
MANDATE_USED = "mandate.used"
MANDATE_EXHAUSTED = "mandate.exhausted"
MANDATE_REVOKED = "mandate.revoked"
MANDATE_EXPIRED = "mandate.expired"


@dataclass(frozen=True, slots=True)
class Used:
    """The mandate a call went under, and its count of uses with this call."""

    mandate: Mandate
    count: int


def _tools(devices: Sequence[Device]) -> dict[str, tuple[Device, Capability]]:
    """The user's tools an agent may call now: each active device's granted device tools, by name."""
    found = {}
    for device in devices:
        if device.status is not DeviceStatus.ACTIVE:
            continue
        for declared in device.capabilities:
            capability = declared.capability
            if declared.granted and capability.device_tool:
                name = ToolName(device.device_id, capability.name)
                if name.fits():
                    found[str(name)] = (device, capability)
    return found


def _agent_for(caller: Principal, body: Mapping[str, Any]) -> str | None:
    if "agent_id" not in body:
        return caller.agent_id if caller.kind is TokenKind.AGENT else None
    agent_id = body["agent_id"]
    if agent_id is not None and (not isinstance(agent_id, str) or not 1 <= len(agent_id) <= 40):
        raise MalformedRequest("agent_id must be an agent's id, or null for any agent of the person.")
    if caller.kind is TokenKind.AGENT and agent_id not in (None, caller.agent_id):
        raise Forbidden("An agent asks for mandates for itself (or for any agent, with null) only.")
    return agent_id


async def request(ctx: Context, caller: Principal, body: Mapping[str, Any]) -> Mandate:
    """Ask the person for a mandate: stored as ``awaiting_signature`` with a ``mandate`` approval on their
    approvers. Raises MalformedRequest (400) with the reason for bounds out of range, Forbidden, and
    Conflict when the person has no device that approves for them."""
    if caller.kind is TokenKind.AGENT:
        caller.require(TokenKind.AGENT, scope=Scope.TOOLS)
    else:
        caller.require(TokenKind.USER)
    assert caller.user_id is not None
    agent_id = _agent_for(caller, body)
    now = ctx.clock.now()
    window = ctx.limits.approval_sign_ttl_seconds
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        devices = await uow.devices.list(caller.user_id)
        tools = _tools(devices)
        bounds = check_bounds(body, {n: c for n, (_, c) in tools.items()}, agent_id)
        approvers = [d for d in devices if d.approver and d.status is DeviceStatus.ACTIVE]
        if not approvers:
            raise Conflict("Nobody can sign this mandate: the person has no device that approves for them.")
        mandate_id = new_id("mnd", 9)  # an approval's subject holds 24 characters
        approval_id = new_id("apr")
        mandate = Mandate(
            tenant_id=caller.tenant_id,
            mandate_id=mandate_id,
            user_id=caller.user_id,
            agent_id=bounds.agent_id,
            tools=bounds.tools,
            constraints=bounds.constraints,
            max_calls=bounds.max_calls,
            per_day=bounds.per_day,
            purpose=bounds.purpose,
            created_at=now,
            expires_at=now + timedelta(seconds=bounds.expires_in_seconds),
            sign_until=now + timedelta(seconds=window),
            approval_id=approval_id,
        )
        shown = {n: (d.name, c) for n, (d, c) in tools.items()}
        # the agent as the person's other cards name it: its token's name, when it asks for itself
        who = who_asks(caller.agent_name) if caller.kind is TokenKind.AGENT and agent_id else ""
        card = preview(mandate, shown, who)
        arguments = canonical(mandate)
        approval = Approval(
            tenant_id=caller.tenant_id,
            approval_id=approval_id,
            user_id=caller.user_id,
            agent_id=caller.agent_id or "",
            invocation_id=None,
            kind=MANDATE,
            subject=mandate_id,
            prompt=summary(mandate, shown, who),
            preview=card,
            sign=new_sign_block(action_sha256(MANDATE, mandate_id, MANDATE, arguments, card), now, window),
            binding_code=binding_code(),
            status=ApprovalStatus.PENDING,
            created_at=now,
            expires_at=mandate.sign_until,
            tool=MANDATE,
            arguments=arguments,
        )
        await uow.mandates.add(mandate)
        await uow.approvals.add(approval)
        for approver in approvers:
            await queue_push(uow, approver, APPROVAL_REQUESTED, approval_id, now)
        await _record(uow, caller.actor, mandate, MANDATE_REQUESTED, "awaiting_signature", now)
    return mandate


async def _record(
    uow: UnitOfWork,
    actor: str,
    mandate: Mandate,
    event: str,
    outcome: str,
    now: datetime,
    extra: Mapping[str, str | int | None] | None = None,
) -> None:
    """Journal and announce a step in a mandate's life: ids and counts, never its values or purpose."""
    data: dict[str, str | int | None] = {
        "user_id": mandate.user_id,
        "agent_id": mandate.agent_id,
        "approval_id": mandate.approval_id,
        **(extra or {}),
    }
    await uow.journal.append(AuditRecord(event, actor, outcome, subject=mandate.mandate_id, data=data), now)
    await uow.events.append(
        mandate.user_id,
        event,
        {"mandate_id": mandate.mandate_id, "agent_id": mandate.agent_id, **(extra or {})},
        now,
    )
    uow.notify(events_key(mandate.tenant_id, mandate.user_id))
    uow.notify(inbox_key(mandate.tenant_id, mandate.user_id))


def require_signature(approval: Approval, signed: bool) -> None:
    """No token makes a mandate live, or refuses one: only a signature from an approver's key."""
    if approval.kind == MANDATE and not signed:
        raise Forbidden("A mandate is signed on a device that approves for the person, with its key.")


async def decided(
    uow: UnitOfWork,
    caller: Principal,
    approval: Approval,
    decision: Decision,
    by: str,
    device_id: str | None,
    now: datetime,
) -> Approval:
    """Apply a checked, signed decision on a ``mandate`` approval: it goes live or is denied. Raises
    Conflict when the mandate was revoked while it waited."""
    mandate = await uow.mandates.get(approval.subject)
    if mandate is None or mandate.status is not MandateStatus.AWAITING_SIGNATURE:
        raise Conflict("This mandate was withdrawn before it was signed; nothing was changed.")
    data = {"device_id": device_id, "kind": approval.kind, "mandate_id": mandate.mandate_id}
    done = await record_decision(uow, caller, approval, decision, by, now, data)
    approved = done.status is ApprovalStatus.APPROVED
    status = MandateStatus.ACTIVE if approved else MandateStatus.DENIED
    if not await uow.mandates.set_status(
        mandate.mandate_id, MandateStatus.AWAITING_SIGNATURE, status, now, by
    ):
        raise Conflict("This mandate was withdrawn before it was signed; nothing was changed.")
    event = MANDATE_ACTIVE if approved else MANDATE_DENIED
    await _record(uow, by, mandate, event, status.value, now)
    return done


def _visible(caller: Principal, mandate: Mandate | None, user_id: str | None) -> bool:
    if mandate is None:
        return False
    if caller.kind is TokenKind.OPERATOR:
        return user_id is None or mandate.user_id == user_id
    if mandate.user_id != caller.user_id:
        return False
    return caller.kind is not TokenKind.AGENT or mandate.agent_id in (None, caller.agent_id)


async def _reader(uow: UnitOfWork, caller: Principal, agents: bool = True) -> None:
    """The person, the operator, a device that approves for the person, and (``agents``) an agent."""
    if caller.kind is TokenKind.AGENT and agents:
        caller.require(TokenKind.AGENT, scope=Scope.TOOLS)
        return
    caller.require(TokenKind.USER, TokenKind.OPERATOR, TokenKind.DEVICE)
    if caller.kind is TokenKind.DEVICE:
        assert caller.device_uid is not None
        device = await uow.devices.by_uid(caller.device_uid)
        if device is None or not device.approver:
            raise Forbidden("Only a device that approves for the person sees and revokes their mandates.")


async def listed(ctx: Context, caller: Principal, user_id: str | None = None) -> Sequence[Mandate]:
    """A user's (or their device's) view: all of the user's mandates; an agent's: its own and those for
    any agent; the operator's: those of ``user_id``, which it must name."""
    if caller.kind is TokenKind.OPERATOR and not user_id:
        raise MalformedRequest("Name the person whose mandates to list: ?user_id=…")
    owner = user_id if caller.kind is TokenKind.OPERATOR else caller.user_id
    assert owner is not None
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        await _reader(uow, caller)
        found = await uow.mandates.list_for(owner)
    return [m for m in found if _visible(caller, m, user_id)]


async def one(ctx: Context, caller: Principal, mandate_id: str) -> Mandate:
    """Raises NotFound for an unknown mandate or another person's (never told apart)."""
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        await _reader(uow, caller)
        mandate = await uow.mandates.get(mandate_id)
    if mandate is None or not _visible(caller, mandate, None):
        raise NotFound(f"There is no mandate {mandate_id!r}.")
    return mandate


async def revoke(ctx: Context, caller: Principal, mandate_id: str) -> Mandate:
    """Revoke a mandate (the person, their device, the operator): no call uses it after this commits, in
    any process. An unsigned one's card is withdrawn too. Revoking a revoked one changes nothing.
    Raises NotFound, Forbidden (an agent)."""
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        await _reader(uow, caller, agents=False)
        mandate = await uow.mandates.get(mandate_id)
        if mandate is None or not _visible(caller, mandate, None):
            raise NotFound(f"There is no mandate {mandate_id!r}.")
        if mandate.status in (MandateStatus.REVOKED, MandateStatus.DENIED):
            return mandate
        if not await uow.mandates.set_status(
            mandate_id, mandate.status, MandateStatus.REVOKED, now, caller.actor
        ):
            raise Conflict("The mandate changed while it was being revoked; try again.")
        if mandate.status is MandateStatus.AWAITING_SIGNATURE and mandate.approval_id is not None:
            approval = await uow.approvals.get(mandate.approval_id)
            if approval is not None and approval.status is ApprovalStatus.PENDING:
                await uow.approvals.decide(approval.decided(ApprovalStatus.EXPIRED, caller.actor, now))
        await _record(uow, caller.actor, mandate, MANDATE_REVOKED, "revoked", now)
        revoked = await uow.mandates.get(mandate_id)
    assert revoked is not None
    return revoked


async def cover(
    ctx: Context, uow: UnitOfWork, user_id: str, request: Request, payload: Mapping[str, Any], now: datetime
) -> Used | None:
    """The live mandate that lets this call through without an approval, with one of its uses spent in
    the call's own transaction; None when none covers it (or the last use went to another call). The
    bounds are checked against the mandates this process last read for the person; where none of them
    covers the call, or the store refuses the use (revoked, expired or spent since), they are read again.
    The use is always the store's to give: a revocation holds from its commit on, in every process."""
    tenant = uow.tenant_id
    for mandate in covering(ctx.mandates.of(tenant, user_id), request, payload, now):
        count = await uow.mandates.take(mandate.mandate_id, now)
        if count is not None:
            return Used(mandate, count)
        ctx.mandates.spent(tenant, user_id, mandate.mandate_id)
    live = await uow.mandates.live_for(user_id, now)
    ctx.mandates.read(tenant, user_id, live)
    for mandate in covering(live, request, payload, now):
        count = await uow.mandates.take(mandate.mandate_id, now)
        if count is not None:
            return Used(mandate, count)
    return None


async def announce_use(uow: UnitOfWork, actor: str, used: Used, invocation_id: str, now: datetime) -> None:
    """Announce ``mandate.used`` (the mandate, the call, the count) on the agent's event stream, and its
    last use (``mandate.exhausted``, journalled too). The call's own journal entry names the mandate and
    the count, so the use needs no entry of its own."""
    mandate = used.mandate
    data: dict[str, str | int | None] = {
        "mandate_id": mandate.mandate_id,
        "agent_id": mandate.agent_id,
        "invocation_id": invocation_id,
        "used": used.count,
    }
    await uow.events.append(mandate.user_id, MANDATE_USED, data, now)
    # a use changes no card and no live mandate: the person's devices need not look again
    uow.notify(events_key(mandate.tenant_id, mandate.user_id))
    if used.count >= mandate.max_calls:
        await _record(uow, "system:mandate", mandate, MANDATE_EXHAUSTED, "exhausted", now)


async def sweep_expired(ctx: Context, tenant_id: str, limit: int) -> int:
    """Mark the tenant's signed mandates whose window closed ``expired``, journalling and announcing
    ``mandate.expired`` once each (the expiry sweep runs this). Returns how many."""
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(tenant_id) as uow:
        ended = await uow.mandates.ended(now, limit)
        for mandate in ended:
            was, expired = MandateStatus.ACTIVE, MandateStatus.EXPIRED
            if await uow.mandates.set_status(mandate.mandate_id, was, expired, now, "system:expired"):
                await _record(uow, "system:expired", mandate, MANDATE_EXPIRED, "expired", now)
    return len(ended)
