"""Approvals: the person's inbox, and a decision the server accepts only when a device key signed it.

Every attempt is journalled, accepted or refused; a refused attempt leaves the approval pending. The
first decision closes the approval on every device. An approved call goes on after the still-allowed
check; a denied one is refused with the person's words, and "this wasn't me" also pauses the agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from tapgate import faults
from tapgate.domain.approvals import Decision, signed_text, verify_decision
from tapgate.domain.audit import AuditRecord
from tapgate.domain.console import CONSOLE_LOGIN, PAUSED_REASON
from tapgate.domain.devices import Device, DeviceStatus
from tapgate.domain.errors import Conflict, Forbidden, Gone, InvalidInput, NotFound, SignatureRefused
from tapgate.domain.events import APPROVAL_DECIDED
from tapgate.domain.grant_requests import GRANT
from tapgate.domain.inbox import Approval, ApprovalStatus, answers
from tapgate.domain.invocations import MAX_POLL_SECONDS, Invocation, Status
from tapgate.domain.mandates import MANDATE
from tapgate.domain.passkeys import Relying
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.proofs import SignedDecision
from tapgate.domain.text import check_display_text
from tapgate.domain.vouching import DEVICE_PAIR
from tapgate.ports import UnitOfWork
from tapgate.services import console, mandates, passkeys
from tapgate.services.context import Context, events_key, inbox_key, invocation_key
from tapgate.services.decisions import record_decision
from tapgate.services.endings import announce
from tapgate.services.granted import grant_decided
from tapgate.services.invoking import deliver, timeout_for
from tapgate.services.vouched import vouched
from tapgate.services.waiting import Deadline, sleep_until_woken

MESSAGE_MAX = 500
_NO_RP = Relying.of("http://127.0.0.1:8080")


@dataclass(frozen=True, slots=True)
class DecisionBody:
    decision: Decision
    device_id: str | None = None
    signature: str | None = None
    message: str | None = None
    not_me: bool = False
    passkey: Mapping[str, Any] | None = None  # the passkey's WebAuthn assertion over the signed text


def _user_of(caller: Principal) -> str:
    """Who may read and decide: the user (``approve`` scope), their devices, or the operator."""
    if caller.kind is TokenKind.OPERATOR:
        return ""
    caller.require(
        TokenKind.USER, TokenKind.DEVICE, scope=Scope.APPROVE if caller.kind is TokenKind.USER else None
    )
    assert caller.user_id is not None
    return caller.user_id


async def inbox(ctx: Context, caller: Principal, wait: float = 0) -> Sequence[Approval]:
    """The user's pending approvals, waiting up to ``wait`` seconds for one to arrive."""
    if caller.kind is TokenKind.OPERATOR:
        raise Forbidden("The inbox is the person's: use a user or device token.")
    user_id = _user_of(caller)
    deadline = Deadline(wait, MAX_POLL_SECONDS)
    with ctx.wake.subscribe(inbox_key(caller.tenant_id, user_id)) as woken:
        while True:
            woken.clear()
            now = ctx.clock.now()
            async with ctx.store.unit_of_work(caller.tenant_id) as uow:
                open_ = [a for a in await uow.approvals.pending_for(user_id) if a.expires_at > now]
                found = await _theirs(uow, caller, open_)
            left = deadline.left()
            if found or left <= 0:
                return found
            await sleep_until_woken(ctx, woken, left)


async def _theirs(uow: UnitOfWork, caller: Principal, found: Sequence[Approval]) -> Sequence[Approval]:
    """What of ``found`` the caller receives: all of it for the person, a device's own share for a device
    (``answers``: every approval for an approver, a lamp only the calls to itself it confirms)."""
    if caller.kind is not TokenKind.DEVICE or not found:
        return found
    assert caller.device_uid is not None
    device = await uow.devices.by_uid(caller.device_uid)
    return [a for a in found if answers(device, a)] if device is not None else []


async def decide(
    ctx: Context, caller: Principal, approval_id: str, body: DecisionBody, relying: Relying | None = None
) -> Approval:
    """Decide an approval. Raises NotFound, Conflict (decided already), Gone (its window passed),
    Forbidden / SignatureRefused (403: the approval stays pending), InvalidInput."""
    user_id = _user_of(caller)
    message = body.message
    if message is not None:
        message = check_display_text(message.strip(), "message", MESSAGE_MAX) or None
    if body.not_me and body.decision is not Decision.DENIED:
        raise InvalidInput("not_me", "not_me goes with the decision denied.")
    now = ctx.clock.now()
    refusal: Exception | None = None
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        approval = await uow.approvals.get(approval_id)
        if approval is None or (user_id and approval.user_id != user_id):
            raise NotFound(f"There is no approval {approval_id!r}.")
        if approval.status is not ApprovalStatus.PENDING:
            raise Conflict(f"This approval was decided already: {approval.status.value}.")
        if approval.invocation_id is None:
            invocation = None
            ended = now >= approval.expires_at
        else:
            invocation = await uow.invocations.get(approval.user_id, approval.invocation_id)
            assert invocation is not None
            ended = now >= approval.expires_at or not invocation.status.open
        if ended and body.signature is None:
            raise Gone("This approval's window has passed; the call it was for has ended.")
        try:
            console.require_signature_for_login(approval, body.signature is not None)
            mandates.require_signature(approval, body.signature is not None)
            verified_by = await passkeys.check_decision(
                ctx, uow, relying or _NO_RP, caller, approval, body.decision, body.device_id, body.passkey
            )
            by, device_id, signed = await _check_decider(ctx, uow, caller, approval, body, now)
        except (Forbidden, SignatureRefused) as e:
            detail = getattr(e, "detail", e.message)
            await uow.journal.append(
                AuditRecord(
                    "approval.refused",
                    caller.actor,
                    "refused",
                    subject=approval_id,
                    reason=str(detail)[:200],
                    data={
                        "decision": body.decision.value,
                        "device_id": body.device_id,
                        "signed": bool(body.signature),
                        "passkey": body.passkey is not None,
                    },
                ),
                now,
            )
            refusal = e
        else:
            if invocation is not None:
                approval = await _record(
                    ctx, uow, caller, approval, invocation, body, message, by, device_id, now, verified_by
                )
            elif approval.kind == CONSOLE_LOGIN:
                approval = await console.login_decided(
                    uow, caller, approval, body.decision, by, device_id, now
                )
            elif approval.kind == GRANT:
                approval = await grant_decided(uow, caller, approval, body.decision, by, device_id, now)
            elif approval.kind == MANDATE:
                approval = await mandates.decided(uow, caller, approval, body.decision, by, device_id, now)
            else:
                approval = await vouched(uow, caller, approval, body.decision, by, device_id, now)
            if signed is not None:
                await uow.proofs.keep_signature(signed)
    if refusal is not None:
        raise refusal
    return approval


async def _check_decider(
    ctx: Context, uow: UnitOfWork, caller: Principal, approval: Approval, body: DecisionBody, now: datetime
) -> tuple[str, str | None, SignedDecision | None]:
    """Who decides, with which device and signature; raises Forbidden or SignatureRefused."""
    if body.signature is None:
        if body.device_id is not None:
            raise InvalidInput(
                "signature", "signature is required when device_id names the device that signed."
            )
        if caller.kind is TokenKind.OPERATOR:
            return "operator (no device signature)", None, None
        if caller.kind is TokenKind.DEVICE:
            raise Forbidden("A device decides by signing: send the signature of the decision.")
        if approval.kind == DEVICE_PAIR and body.decision is Decision.APPROVED:
            raise Forbidden("A new device is let in only by a signature from a device that approves for you.")
        if ctx.limits.require_device_signature or caller.require_device_signature:
            raise Forbidden("This decision needs a signature from one of your devices.")
        return f"user:{caller.user_id} (no device signature)", None, None
    device_id = body.device_id or (caller.device_id if caller.kind is TokenKind.DEVICE else None)
    if device_id is None:
        raise InvalidInput(
            "device_id", "device_id is required with a signature: name the device that signed."
        )
    if caller.kind is TokenKind.DEVICE and device_id != caller.device_id:
        raise Forbidden("A device signs for itself only.")
    device = await uow.devices.get(approval.user_id, device_id)
    if device is None or device.status is not DeviceStatus.ACTIVE:
        raise SignatureRefused("unknown, revoked or foreign device")
    if not answers(device, approval):
        raise SignatureRefused("the device does not approve for the person")
    if int(now.timestamp()) >= approval.sign.expires_at or now >= approval.expires_at:
        raise SignatureRefused("the signing window has passed")
    payload = signed_text(
        approval.sign.format,
        approval.approval_id,
        body.decision,
        approval.kind,
        approval.subject,
        approval.sign.action_sha256,
        approval.sign.challenge,
        approval.sign.expires_at,
    )
    verify_decision(device.alg, device.public_key, payload, body.signature)
    faults.crash_point("approval.verify")
    signed = SignedDecision(
        approval.approval_id, device.device_id, device.alg, device.public_key, body.signature
    )
    return f"device:{device.device_id}", device.device_id, signed


async def _record(
    ctx: Context,
    uow: UnitOfWork,
    caller: Principal,
    approval: Approval,
    invocation: Invocation,
    body: DecisionBody,
    message: str | None,
    by: str,
    device_id: str | None,
    now: datetime,
    verified_by: str | None = None,
) -> Approval:
    decided = await record_decision(
        uow,
        caller,
        approval,
        body.decision,
        by,
        now,
        {
            "device_id": device_id,
            "invocation_id": invocation.invocation_id,
            "not_me": body.not_me,
            "verified_by": verified_by,
        },
    )
    status = decided.status
    await uow.events.append(
        approval.user_id,
        APPROVAL_DECIDED,
        {
            "approval_id": approval.approval_id,
            "invocation_id": invocation.invocation_id,
            "decision": status.value,
        },
        now,
    )
    uow.notify(events_key(approval.tenant_id, approval.user_id))
    if status is ApprovalStatus.APPROVED:
        await _go_on(ctx, uow, invocation, now)
    else:
        reason = "[policy] the person declined this call" + (f": {message}" if message else "")
        refused = invocation.refused(reason, now)
        if await uow.invocations.resolve(refused):
            await announce(uow, refused, "invocation.refused", caller.actor, now)
        if body.not_me:
            until = now + timedelta(seconds=ctx.limits.not_me_cooldown_seconds)
            await uow.pauses.pause(approval.user_id, approval.agent_id, until)
            await uow.journal.append(
                AuditRecord(
                    "agent.paused",
                    caller.actor,
                    subject=approval.agent_id,
                    reason="the person said this request wasn't them",
                    data={"user_id": approval.user_id, "until": until.isoformat()},
                ),
                now,
            )
    return decided


async def _go_on(ctx: Context, uow: UnitOfWork, invocation: Invocation, now: datetime) -> None:
    """Step 9, still allowed: same device and pairing, capability declared and granted, not revoked, and
    the person has not paused every agent meanwhile."""
    if await console.is_paused(uow, invocation.user_id, now):
        refused = invocation.refused(f"[deny] {PAUSED_REASON}", now)
        if await uow.invocations.resolve(refused):
            await announce(uow, refused, "invocation.refused", "system:paused", now)
        return
    device = await uow.devices.by_uid(invocation.device_uid)
    if device is None or not device.may_run(invocation.capability):
        refused = invocation.refused("[deny] the call is no longer allowed: its device or grant changed", now)
        if await uow.invocations.resolve(refused):
            await announce(uow, refused, "invocation.refused", "system:still-allowed", now)
        return
    going = _pending(invocation, device, ctx, now)
    if await uow.invocations.proceed(going):
        await deliver(ctx, uow, going, device, now)
        await uow.journal.append(
            AuditRecord(
                "invocation.created",
                "system:approved",
                "pending",
                subject=invocation.invocation_id,
                data={"user_id": invocation.user_id, "tool": invocation.tool, "device_id": device.device_id},
            ),
            now,
        )
        uow.notify(invocation_key(invocation.tenant_id, invocation.user_id, invocation.invocation_id))


def _pending(invocation: Invocation, device: Device, ctx: Context, now: datetime) -> Invocation:
    declared = device.declared(invocation.capability)
    assert declared is not None
    return replace(
        invocation, status=Status.PENDING, expires_at=now + timeout_for(ctx, declared.capability, device, now)
    )
