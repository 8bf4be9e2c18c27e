"""Invoke: the check chain (``check_chain``), then asking the person or delivery to the device.

The input is copied first. The first check that fails is the call's answer, a refusal that leaves only
its audit entry. A call that passes is written as a ``pending`` row in the same transaction as its
audit entry (and its push), and its device is woken.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from tapgate import faults
from tapgate.domain import phone_action
from tapgate.domain.audit import AuditRecord
from tapgate.domain.capabilities import traits
from tapgate.domain.check_chain import (
    Passed,
    Refusal,
    Request,
    by_policy,
    check_input,
    deny,
    how_asked,
    paused_agent,
)
from tapgate.domain.devices import PHONE_ACTIONS, Capability, Device
from tapgate.domain.errors import Conflict, InvalidInput, NotFound, TooLongToShow
from tapgate.domain.ids import new_id
from tapgate.domain.inbox import may_answer, render_preview, why_asked
from tapgate.domain.invocations import (
    MAX_WAIT_SECONDS,
    TRUST,
    Invocation,
    Status,
    arguments_sha256,
    result_text,
)
from tapgate.domain.mandates import COVERABLE_HINT
from tapgate.domain.policy import Verdict
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.push import INVOCATION_PENDING
from tapgate.domain.shown import TOO_LONG
from tapgate.ports import UnitOfWork, Woken
from tapgate.services import check_chain, mandates
from tapgate.services.asking import open_approval
from tapgate.services.context import (
    Context,
    device_key,
    invocation_key,
)
from tapgate.services.endings import device_online, expire
from tapgate.services.handover import Slot
from tapgate.services.outbox import queue_push
from tapgate.services.waiting import Deadline, sleep_until_woken

_INVOCATION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Call:
    tool: str
    arguments: Mapping[str, Any]
    invocation_id: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    origin: str = "owner"
    shadow: bool = False
    if_offline: str = "wait"  # "fail": refuse at once (unavailable) when the device is offline


IF_OFFLINE = ("wait", "fail")


@dataclass(frozen=True, slots=True)
class View:
    """The invocation view of Appendix A."""

    id: str
    tool: str
    status: Status
    created_at: datetime
    resolved_at: datetime | None = None
    reason: str | None = None
    text: str | None = None
    message: str | None = None
    late_report: bool = False
    binding_code: str | None = None
    device_online: bool | None = None  # a live link or a push route exists (None: no device was found)
    mandate_id: str | None = None  # the standing mandate it went under, without an approval

    def as_dict(self) -> dict[str, Any]:
        result = None
        if self.text is not None:
            result = {"text": self.text, "message": self.message, "trust": TRUST}
        return {
            "id": self.id,
            "tool": self.tool,
            "status": self.status.value,
            "result": result,
            "reason": self.reason,
            "created_at": self.created_at.isoformat(),
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
            "binding_code": self.binding_code,
            "device_online": self.device_online,
            "mandate_id": self.mandate_id,
        }


def view(invocation: Invocation, device_online: bool | None = None) -> View:
    text = None
    if invocation.status in (Status.DONE, Status.DECLINED, Status.FAILED, Status.EXPIRED):
        text = _text(invocation)
    return View(
        invocation.invocation_id,
        invocation.tool,
        invocation.status,
        invocation.created_at,
        invocation.resolved_at,
        text=text,
        message=invocation.message,
        reason=invocation.reason,
        late_report=invocation.late_status is not None,
        binding_code=invocation.binding_code,
        device_online=device_online,
        mandate_id=invocation.mandate_id,
    )


def _text(invocation: Invocation) -> str:
    if invocation.capability == PHONE_ACTIONS:
        action = str(invocation.arguments.get("action", ""))
        if invocation.status is Status.EXPIRED:
            return phone_action.no_answer_text(action)
        return phone_action.result_text(invocation.status.value, invocation.message, action)
    return result_text(invocation.capability, invocation.status, invocation.message)


async def invoke(ctx: Context, caller: Principal, call: Call, wait: float = 0) -> View:
    """Run the check chain and deliver, or refuse. Raises InvalidInput (bad call shape), Conflict
    (an invocation id reused with other arguments), Forbidden (not an agent with ``tools``)."""
    caller.require(TokenKind.AGENT, scope=Scope.TOOLS)
    arguments = copy.deepcopy(dict(call.arguments))  # nothing changed afterwards reaches anyone
    if call.invocation_id is not None and not _INVOCATION_ID.fullmatch(call.invocation_id):
        raise InvalidInput(
            "invocation_id", "invocation_id must be 1-64 letters, digits, '.', '_', ':' or '-'."
        )
    if call.origin not in ("owner", "untrusted"):
        raise InvalidInput("origin", "origin must be owner or untrusted.")
    if call.if_offline not in IF_OFFLINE:
        raise InvalidInput("if_offline", "if_offline must be wait or fail.")
    invocation_id = call.invocation_id or new_id("inv")
    if wait <= 0:
        return (await _invoke(ctx, caller, call, arguments, invocation_id)).view
    # Subscribed before the row is written, so the answer's wake cannot come before the wait and the
    # row just written need not be read again before waiting.
    key = invocation_key(caller.tenant_id, _user_of(caller), invocation_id)
    with ctx.wake.subscribe(key) as answered, ctx.handover.waiting(key) as slot:
        first = await _invoke(ctx, caller, call, arguments, invocation_id)
        if first.status_known is None:
            return first.view
        # A live link or a held long-poll of this process, woken by the commit, sends the call to its
        # device before this goes on: the device works on it while this sets up its wait.
        await asyncio.sleep(0)
        return await _await_answer(
            ctx, caller, invocation_id, wait, answered, slot, first.status_known, first.online
        )


@dataclass(frozen=True, slots=True)
class _Invoked:
    view: View
    status_known: Invocation | None  # the row as this call wrote or found it; None: refused
    online: bool | None  # whether its device had a live link or a push route then


async def _invoke(
    ctx: Context, caller: Principal, call: Call, arguments: dict[str, Any], invocation_id: str
) -> _Invoked:
    digest = arguments_sha256(call.tool, arguments)
    now = ctx.clock.now()
    user = _user_of(caller)
    try:
        async with ctx.store.unit_of_work(caller.tenant_id) as uow:
            existing = await uow.invocations.get(user, invocation_id) if call.invocation_id else None
            if existing is not None:
                delivered = _replayed(existing, caller, digest)
                online = await device_online(uow, delivered, now)
            else:
                try:
                    delivered, online = await _chain(
                        ctx, uow, caller, call, arguments, invocation_id, digest, now
                    )
                except Refusal as refusal:
                    await _journal_refusal(uow, caller, call, invocation_id, refusal, now)
                    known = refusal.device
                    refused = View(
                        invocation_id,
                        call.tool,
                        refusal.status,
                        now,
                        now,
                        reason=refusal.reason,
                        device_online=known.reachable(now) if known is not None else None,
                    )
                    return _Invoked(refused, None, None)
                faults.crash_point("invoke.before_commit")
    except Conflict:
        if call.invocation_id is None:
            raise
        # A replay that raced the first call: the first one's row decides (gate G2).
        async with ctx.store.unit_of_work(caller.tenant_id) as uow:
            existing = await uow.invocations.get(user, invocation_id)
            online = await device_online(uow, existing, now) if existing is not None else None
        if existing is None:
            raise
        delivered = _replayed(existing, caller, digest)
    faults.crash_point("invoke.after_commit")
    return _Invoked(view(delivered, online), delivered, online)


def _replayed(existing: Invocation, caller: Principal, digest: str) -> Invocation:
    """The invocation a replayed id names. Raises Conflict when the id was used for another call."""
    if existing.agent_id != (caller.agent_id or "") or existing.arguments_sha256 != digest:
        raise Conflict(f"invocation_id {existing.invocation_id!r} was used for another call; use a new id.")
    return existing


async def _chain(
    ctx: Context,
    uow: UnitOfWork,
    caller: Principal,
    call: Call,
    arguments: dict[str, Any],
    invocation_id: str,
    digest: str,
    now: datetime,
) -> tuple[Invocation, bool]:
    """The check chain (``check_chain``: read, then steps 1-7b), then asking or delivering; the call as
    written, and whether its device is online (``device_online``)."""
    assert caller.user_id is not None
    request = Request(call.tool, caller.agent_id or "", call.session_id, call.origin, call.shadow)
    read, passed = await check_chain.through(
        uow, ctx.policies, caller.user_id, request, ctx.device_channel, now
    )
    device, capability, decision, origin = passed.device, passed.capability, passed.decision, passed.origin
    online = device.reachable(now)
    payload = check_input(passed, arguments, online, call.if_offline)
    # 8. Ask: the person decides on a device, with a signature; the call waits for it. A live mandate
    # the person signed may answer for them instead (``how_asked`` says when).
    asked = how_asked(passed, call.shadow)
    if asked.heard:
        paused_agent(passed, read.agent_paused_until, now)
    used = await mandates.cover(ctx, uow, caller.user_id, request, payload, now) if asked.coverable else None
    ask = asked.ask and used is None
    if ask or traits(capability.name).confirmed_on_screen:
        await _check_fatigue(ctx, uow, caller.user_id, passed)
    if ask:
        try:
            render_preview(capability, payload)
        except TooLongToShow:
            raise deny(TOO_LONG, device, capability.name) from None
        approvers = [
            d
            for d in await uow.devices.list(caller.user_id)
            if may_answer(d, capability.name, device.device_id, call=True)
        ]
        if not approvers:
            raise by_policy(
                "nobody can approve this call: the person has no device that approves for them",
                device,
                capability.name,
            )
        waiting = _new_invocation(
            ctx, caller, call, device, capability, payload, invocation_id, digest, now, origin
        )
        # the agent reads which rule asks the person, and that a mandate could spare them the next ask
        reason = (
            f"[policy] {decision.reason}" if decision.verdict is Verdict.ASK else "[confirm] the device asks"
        )
        if origin == "owner" and capability.name != PHONE_ACTIONS:
            reason = f"{reason}; {COVERABLE_HINT}"
        waiting = replace(waiting, reason=reason)
        why = why_asked(decision.verdict is Verdict.ASK, decision.message)
        opened = await open_approval(
            ctx, uow, caller, waiting, device, capability, approvers, decision.rule, now, decision.line, why
        )
        return opened, online
    # 10. Deliver: the pending row, its journal entry and its wake-up, in one transaction. A call under a
    # mandate names it, and the count of its uses with this call, in that same entry.
    mandate_id = None if used is None else used.mandate.mandate_id
    invocation = _new_invocation(
        ctx, caller, call, device, capability, payload, invocation_id, digest, now, origin, mandate_id
    )
    data = _audit_data(call, device.device_id, capability.name, decision.rule, decision.line)
    if used is not None:
        data["mandate_id"] = mandate_id
        data["mandate_used"] = used.count
    await deliver(ctx, uow, invocation, device, now)
    await uow.journal.append(
        AuditRecord("invocation.created", caller.actor, "pending", subject=invocation_id, data=data), now
    )
    if used is not None:
        await mandates.announce_use(uow, caller.actor, used, invocation_id, now)
    return invocation, online


def _new_invocation(
    ctx: Context,
    caller: Principal,
    call: Call,
    device: Device,
    capability: Capability,
    payload: dict[str, Any],
    invocation_id: str,
    digest: str,
    now: datetime,
    origin: str,
    mandate_id: str | None = None,
) -> Invocation:
    assert caller.user_id is not None
    return Invocation(
        tenant_id=caller.tenant_id,
        invocation_id=invocation_id,
        user_id=caller.user_id,
        agent_id=caller.agent_id or "",
        device_uid=device.device_uid,
        device_id=device.device_id,
        tool=call.tool,
        capability=capability.name,
        arguments=payload,
        arguments_sha256=digest,
        status=Status.PENDING,
        created_at=now,
        expires_at=now + _timeout(ctx, capability, device, now),
        session_id=call.session_id,
        run_id=call.run_id,
        origin=origin,
        mandate_id=mandate_id,
    )


async def deliver(
    ctx: Context, uow: UnitOfWork, invocation: Invocation, device: Device, now: datetime
) -> None:
    """Write (or move to) the pending row with its push, and wake the device: a call let through."""
    key = device_key(invocation.tenant_id, device.device_uid)
    if invocation.status is Status.PENDING and invocation.approval_id is None:
        await uow.invocations.add(invocation)
        if device.push is None:
            # The row as written: a live link of this process sends it without reading it back. (A
            # device with a push target reads it, since its fetch marks it to withhold the push.)
            uow.hand(key, invocation)
        else:
            uow.notify(key)
    else:
        uow.notify(key)
    # A hint for a sleeping device; a live link gets the first moments to take the call itself.
    delay = ctx.limits.live_ack_seconds if device.live(now) else 0
    await queue_push(uow, device, INVOCATION_PENDING, invocation.invocation_id, now, delay)


async def _check_fatigue(ctx: Context, uow: UnitOfWork, user_id: str, passed: Passed) -> None:
    """Push fatigue: the person's open cards are capped."""
    waiting = await uow.approvals.count_pending(user_id) + await uow.invocations.count_confirming(user_id)
    if waiting >= ctx.limits.max_open_confirmations:
        raise by_policy(
            f"{waiting} requests already wait for the person to confirm; wait for them to answer first",
            passed.device,
            passed.capability.name,
        )


def timeout_for(ctx: Context, capability: Capability, device: Device, now: datetime) -> timedelta:
    return _timeout(ctx, capability, device, now)


def _timeout(ctx: Context, capability: Capability, device: Device, now: datetime) -> timedelta:
    if capability.name == PHONE_ACTIONS:
        return timedelta(seconds=phone_action.catalogue().wait_seconds)
    person_acts = traits(capability.name).confirmed_on_screen or capability.confirm
    if not person_acts and device.link_until is not None and device.link_until > now:
        return timedelta(seconds=ctx.limits.device_call_timeout_seconds)
    return timedelta(seconds=ctx.limits.invocation_timeout_seconds)


def _audit_data(
    call: Call, device_id: str, capability: str, rule: str = "", line: int = 0
) -> dict[str, str | int | bool | None]:
    return {
        "tool": call.tool,
        "device_id": device_id,
        "capability": capability,
        "session_id": call.session_id,
        "origin": call.origin,
        "shadow": call.shadow,
        "rule": rule or None,
        "rule_line": line or None,
    }


async def _journal_refusal(
    uow: UnitOfWork, caller: Principal, call: Call, invocation_id: str, refusal: Refusal, now: datetime
) -> None:
    device_id = refusal.device.device_id if refusal.device else ""
    await uow.journal.append(
        AuditRecord(
            "invocation.refused" if refusal.status is Status.REFUSED else "invocation.unavailable",
            caller.actor,
            refusal.status.value,
            subject=invocation_id,
            reason=refusal.reason,
            data=_audit_data(
                call,
                device_id,
                refusal.capability,
                refusal.rule.rule if refusal.rule else "",
                refusal.rule.line if refusal.rule else 0,
            ),
        ),
        now,
    )


async def result(ctx: Context, caller: Principal, invocation_id: str, wait: float = 0) -> View:
    """The invocation's view, waiting up to ``wait`` seconds for its answer. An agent reads the calls its
    own agent made; the user's own token reads all of theirs. Raises NotFound."""
    if caller.kind is not TokenKind.USER:
        caller.require(TokenKind.AGENT, TokenKind.USER, scope=Scope.TOOLS)
    key = invocation_key(caller.tenant_id, _user_of(caller), invocation_id)
    with ctx.wake.subscribe(key) as answered, ctx.handover.waiting(key) as slot:
        return await _await_answer(ctx, caller, invocation_id, wait, answered, slot)


async def _await_answer(
    ctx: Context,
    caller: Principal,
    invocation_id: str,
    wait: float,
    answered: Woken,
    slot: Slot,
    known: Invocation | None = None,
    known_online: bool | None = None,
) -> View:
    """Wait on ``answered`` (subscribed before ``known`` was read, if given) for the invocation's end;
    an answer handed over in ``slot`` is taken once the caller has been shown to own the call."""
    deadline = Deadline(wait, MAX_WAIT_SECONDS)
    owned = known is not None  # the caller wrote it or read it: it is theirs
    while True:
        if known is not None:
            invocation, online, known = known, known_online, None
        elif owned and slot.ended is not None:
            invocation, online = slot.ended
        else:
            answered.clear()
            invocation, online = await _read(ctx, caller, invocation_id)
            owned = True
        if not invocation.status.open:
            return view(invocation, online)
        now = ctx.clock.now()
        if invocation.due(now):
            return view(await expire(ctx, invocation, now), online)
        left = deadline.left()
        if left <= 0:
            return view(invocation, online)
        until_due = (invocation.expires_at - now).total_seconds()
        faults.crash_point("result.waiting")
        await sleep_until_woken(ctx, answered, min(left, until_due) + 0.001)


def _user_of(caller: Principal) -> str:
    """The user whose ids a call names: an invocation id is its user's own."""
    assert caller.user_id is not None  # agents and users only: require() ran first
    return caller.user_id


async def _read(ctx: Context, caller: Principal, invocation_id: str) -> tuple[Invocation, bool | None]:
    """The caller's invocation, and whether its device is online now."""
    async with ctx.store.reading(caller.tenant_id) as uow:
        invocation, presence = await uow.invocations.get_with_presence(_user_of(caller), invocation_id)
    if invocation is None:
        raise NotFound(f"There is no invocation {invocation_id!r}.")
    if caller.kind is TokenKind.AGENT and invocation.agent_id != (caller.agent_id or ""):
        raise NotFound(f"There is no invocation {invocation_id!r}.")  # another agent's: never told apart
    return invocation, None if presence is None else presence.online(ctx.clock.now())
