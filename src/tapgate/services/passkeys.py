"""Passkeys: a device registers its WebAuthn credential, and a decision proves the person.

The decision path calls ``check_decision`` once, before the device signature is checked, in the same
unit of work: a good assertion moves the credential's sign count there and then, so the same assertion
sent again (even after the signature beside it was refused) is a replay and refused too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tapgate.domain.approvals import Decision, signed_text
from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import DeviceStatus
from tapgate.domain.errors import InvalidInput, NotFound, PasskeyRefused
from tapgate.domain.inbox import Approval
from tapgate.domain.passkeys import (
    Passkey,
    Relying,
    assertion_credential_id,
    registration_options,
    verify_assertion,
    verify_registration,
)
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.ports import UnitOfWork
from tapgate.services.context import Context
from tapgate.services.devices import DeviceCaller

PASSKEY = "passkey"


async def options(ctx: Context, relying: Relying, caller: DeviceCaller) -> dict[str, Any]:
    """What the browser app passes to ``navigator.credentials.create``."""
    caller.principal.require(TokenKind.DEVICE, scope=Scope.DEVICE_READ)
    device = caller.device
    async with ctx.store.unit_of_work(caller.principal.tenant_id) as uow:
        existing = [p.credential_id for p in await uow.passkeys.for_device(device.device_uid)]
    name = f"{device.user_id} ({device.device_id})"
    return registration_options(relying, device.tenant_id, device.device_uid, name, existing)


async def register(
    ctx: Context, relying: Relying, caller: DeviceCaller, credential: Mapping[str, Any]
) -> Passkey:
    """Verify and keep the device's new credential. Raises InvalidInput, Conflict."""
    caller.principal.require(TokenKind.DEVICE, scope=Scope.DEVICE_WRITE)
    device = caller.device
    verified = verify_registration(relying, device.tenant_id, device.device_uid, dict(credential))
    now = ctx.clock.now()
    passkey = Passkey(
        tenant_id=device.tenant_id,
        credential_id=verified.credential_id,
        device_uid=device.device_uid,
        user_id=device.user_id,
        public_key=verified.public_key,
        sign_count=verified.sign_count,
        created_at=now,
    )
    async with ctx.store.unit_of_work(device.tenant_id) as uow:
        await uow.passkeys.add(passkey)
        await uow.journal.append(
            AuditRecord(
                "passkey.registered",
                caller.principal.actor,
                subject=device.device_id,
                data={"credential_id": verified.credential_id[:64], "user_id": device.user_id},
            ),
            now,
        )
    return passkey


async def list_for(ctx: Context, caller: DeviceCaller) -> tuple[Sequence[Passkey], bool]:
    """The device's credentials, and whether its user's decisions need one."""
    caller.principal.require(TokenKind.DEVICE, scope=Scope.DEVICE_READ)
    device = caller.device
    async with ctx.store.unit_of_work(device.tenant_id) as uow:
        found = await uow.passkeys.for_device(device.device_uid)
        own = await uow.passkeys.required(device.user_id)
    return found, ctx.limits.require_user_verification if own is None else own


async def set_required(ctx: Context, caller: Principal, user_id: str, required: bool | None) -> None:
    """The user's own require_user_verification (None: the global setting). Operator only."""
    caller.require(TokenKind.OPERATOR)
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        if await uow.users.get(user_id) is None:
            raise NotFound(f"There is no user {user_id!r}.")
        await uow.passkeys.set_required(user_id, required)
        await uow.journal.append(
            AuditRecord(
                "user.verification_set",
                caller.actor,
                subject=user_id,
                data={"user_id": user_id, "require_user_verification": required},
            ),
            now,
        )


async def check_decision(
    ctx: Context,
    uow: UnitOfWork,
    relying: Relying,
    caller: Principal,
    approval: Approval,
    decision: Decision,
    device_id: str | None,
    assertion: Mapping[str, Any] | None,
) -> str | None:
    """``"passkey"`` when a good assertion came with the decision; None when none came and none is
    needed. Raises PasskeyRefused (403) when one is needed and missing, or does not verify: the user
    verification flag off, a challenge for another text, another credential (one of no active device of
    the approval's user, or not of the device that signed), a replay or a count that went back."""
    if assertion is None:
        if caller.kind is TokenKind.OPERATOR:  # the operator decides without a phone
            return None
        own = await uow.passkeys.required(approval.user_id)
        required = ctx.limits.require_user_verification if own is None else own
        if required:
            raise PasskeyRefused("no passkey came with the decision, and this person's decisions need one")
        return None
    if not isinstance(assertion, Mapping):
        raise InvalidInput("passkey", "passkey must be the assertion object the browser returned.")
    credential_id = assertion_credential_id(dict(assertion))
    passkey = await uow.passkeys.get(credential_id)
    if passkey is None or passkey.user_id != approval.user_id:
        raise PasskeyRefused("unknown credential")
    device = await uow.devices.by_uid(passkey.device_uid)
    if device is None or device.status is not DeviceStatus.ACTIVE:
        raise PasskeyRefused("the credential's device is not active")
    signer = device_id or (caller.device_id if caller.kind is TokenKind.DEVICE else None)
    if signer is not None and device.device_id != signer:
        raise PasskeyRefused("the credential belongs to another device than the one deciding")
    text = signed_text(
        approval.sign.format,
        approval.approval_id,
        decision,
        approval.kind,
        approval.subject,
        approval.sign.action_sha256,
        approval.sign.challenge,
        approval.sign.expires_at,
    )
    count = verify_assertion(relying, passkey, text, dict(assertion))
    await uow.passkeys.set_sign_count(credential_id, count)
    return PASSKEY
