"""Proofs: a decided approval, a mandate, or a call made under one, signed with the tenant's issuer key
for anyone to check offline. The issuer key is made on first use and kept in the store; rotating adds a
new one that signs from then on, and every older public key stays published so old proofs still check.

Who may fetch a proof: the person, the agent whose call (or mandate) it was, and the operator. Anyone
else is told there is no such thing, exactly as for an id that does not exist."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import Conflict, Gone, InvalidInput, NotFound
from tapgate.domain.inbox import Approval, ApprovalStatus
from tapgate.domain.mandates import MANDATE
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.proofs import (
    Issued,
    IssuerKey,
    Signer,
    approval_proof,
    call_proof,
    jwks,
    new_issuer_key,
)
from tapgate.ports import Store, UnitOfWork
from tapgate.services.context import Context

ISSUER_KEY_CREATED = "issuer.key_created"
_DECIDED = "approval.decided"
_CREATED = "invocation.created"  # a covered call's own entry names its mandate and the use it spent


async def _current_key(uow: UnitOfWork, now: datetime) -> IssuerKey:
    """The tenant's newest issuer key, made now if it has none."""
    keys = await uow.proofs.issuer_keys()
    if keys:
        return keys[0]
    return await _new_key(uow, "system:first-proof", now)


async def _new_key(uow: UnitOfWork, actor: str, now: datetime) -> IssuerKey:
    key = new_issuer_key(now)
    await uow.proofs.add_issuer_key(key)
    await uow.journal.append(AuditRecord(ISSUER_KEY_CREATED, actor, subject=key.kid), now)
    return key


async def rotate(ctx: Context, tenant_id: str) -> IssuerKey:
    """A new issuer key for the tenant: it signs every proof from now on; the older ones stay published."""
    async with ctx.store.unit_of_work(tenant_id) as uow:
        if await uow.tenants.get() is None:
            raise NotFound(f"There is no tenant {tenant_id!r}.")
        return await _new_key(uow, "cli:issuer-rotate", ctx.clock.now())


async def published(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every tenant's public issuer keys as one JWK Set (a tenant without a proof yet has none)."""
    keys: list[IssuerKey] = []
    for tenant_id in await store.tenant_ids():
        async with store.unit_of_work(tenant_id) as uow:
            keys.extend(await uow.proofs.issuer_keys())
    return jwks(keys)


def _user_of(caller: Principal, user_id: str | None) -> str | None:
    """The person whose things the caller may see a proof of; None for the operator without a name."""
    if caller.kind is TokenKind.OPERATOR:
        return user_id
    if caller.kind in (TokenKind.USER, TokenKind.AGENT):
        return caller.user_id
    return None


def _may_ask(caller: Principal) -> None:
    """A proof is for the person, their agents (with the tools scope) and the operator; a device's
    token is refused (403) before anything is read."""
    if caller.kind is TokenKind.AGENT:
        caller.require(TokenKind.AGENT, scope=Scope.TOOLS)
    else:
        caller.require(TokenKind.USER, TokenKind.OPERATOR, TokenKind.AGENT)


def _sees(caller: Principal, user_id: str, agent_id: str | None) -> bool:
    if caller.kind is TokenKind.OPERATOR:
        return True
    if caller.kind is TokenKind.USER:
        return caller.user_id == user_id
    if caller.kind is TokenKind.AGENT:
        return caller.user_id == user_id and agent_id in (None, caller.agent_id)
    return False


async def _entry(
    uow: UnitOfWork, action: str, subject: str, mandate_id: str | None = None
) -> tuple[int, str]:
    found = [
        e
        for e in await uow.journal.find(action, subject)
        if mandate_id is None or e.data.get("mandate_id") == mandate_id
    ]
    if not found:
        raise Conflict("The journal entry for this is not written yet; ask again in a moment.")
    return found[-1].seq, found[-1].hash


async def _of_approval(
    issuer: str, uow: UnitOfWork, approval: Approval, disclose: bool, now: datetime
) -> str:
    if approval.status is ApprovalStatus.PENDING:
        raise Conflict(
            "This approval is not decided yet: its proof exists once the person's device decides it."
        )
    if approval.status is ApprovalStatus.EXPIRED:
        raise Conflict("This approval expired undecided: there is no decision to prove.")
    if approval.invocation_id is None and approval.kind != MANDATE:
        raise Conflict(f"Proofs cover calls and mandates; this approval is a {approval.kind} approval.")
    signed = await uow.proofs.signature(approval.approval_id)
    if signed is None:
        raise Conflict(
            "This approval was decided without a device's signature, so there is no decision of the "
            "person's to prove."
        )
    if approval.arguments is None:
        raise Gone(
            "This call's arguments were erased after the retention period, so its proof cannot be made."
        )
    entry = await _entry(uow, _DECIDED, approval.approval_id)
    signer = Signer(Issued(issuer, await _current_key(uow, now), now))
    return approval_proof(signer, approval, signed, entry, disclose, approval.kind == MANDATE)


async def for_approval(ctx: Context, issuer: str, caller: Principal, approval_id: str, disclose: bool) -> str:
    """The proof of a decided approval. Raises NotFound (unknown, or not the caller's), Conflict (not
    decided, or decided without a device signature), Gone (its arguments were erased)."""
    _may_ask(caller)
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        approval = await uow.approvals.get(approval_id)
        if approval is None or not _sees(caller, approval.user_id, approval.agent_id):
            raise NotFound(f"There is no approval {approval_id!r}.")
        return await _of_approval(issuer, uow, approval, disclose, now)


async def for_mandate(ctx: Context, issuer: str, caller: Principal, mandate_id: str) -> str:
    """The proof of a signed mandate. Raises NotFound, Conflict (not signed yet, or denied unsigned)."""
    _may_ask(caller)
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        mandate = await uow.mandates.get(mandate_id)
        if mandate is None or not _sees(caller, mandate.user_id, mandate.agent_id):
            raise NotFound(f"There is no mandate {mandate_id!r}.")
        return await _mandate_proof(issuer, uow, mandate.approval_id, now)


async def _mandate_proof(issuer: str, uow: UnitOfWork, approval_id: str | None, now: datetime) -> str:
    approval = None if approval_id is None else await uow.approvals.get(approval_id)
    if approval is None:
        raise Conflict(
            "This mandate has no decision yet: its proof exists once the person's device signs it."
        )
    return await _of_approval(issuer, uow, approval, True, now)


async def for_invocation(
    ctx: Context,
    issuer: str,
    caller: Principal,
    invocation_id: str,
    disclose: bool,
    user_id: str | None = None,
) -> str:
    """The proof of a call: the approval the person signed for it, or the call with the proof of the
    mandate it went under. Raises NotFound, InvalidInput (the operator names no user), Conflict."""
    _may_ask(caller)
    if caller.kind is TokenKind.OPERATOR and user_id is None:
        raise InvalidInput("user_id", "user_id is required: the operator names the person whose call it was.")
    person = _user_of(caller, user_id)
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        invocation = None if person is None else await uow.invocations.get(person, invocation_id)
        if invocation is None or not _sees(caller, invocation.user_id, invocation.agent_id):
            raise NotFound(f"There is no invocation {invocation_id!r}.")
        if invocation.approval_id is not None:
            approval = await uow.approvals.get(invocation.approval_id)
            if approval is None:
                raise NotFound(f"There is no invocation {invocation_id!r}.")
            return await _of_approval(issuer, uow, approval, disclose, now)
        if invocation.mandate_id is None:
            raise Conflict(
                "This call needed no approval and went under no mandate: the person signed nothing to prove."
            )
        mandate = await uow.mandates.get(invocation.mandate_id)
        inner = await _mandate_proof(issuer, uow, None if mandate is None else mandate.approval_id, now)
        entry = await _entry(uow, _CREATED, invocation.invocation_id, invocation.mandate_id)
        signer = Signer(Issued(issuer, await _current_key(uow, now), now))
        return call_proof(signer, invocation, inner, entry, disclose)


__all__: Sequence[str] = ["for_approval", "for_invocation", "for_mandate", "published", "rotate"]
