"""Pairing: the person's own way to let a device in (code → claim → comparison code → consent)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import Device, DeviceStatus, apply_grants
from tapgate.domain.errors import ComparisonMismatch, Conflict, Forbidden, Gone, NotFound
from tapgate.domain.events import DEVICE_PAIRED
from tapgate.domain.inbox import ApprovalStatus
from tapgate.domain.pairing import Pairing, PairingStatus, claim, consent, new_pairing, parse_code
from tapgate.domain.principals import Principal, TokenKind
from tapgate.domain.vouching import NEEDS_OPERATOR, WHERE_TO_APPROVE
from tapgate.ports import Clock, Store, UnitOfWork
from tapgate.services.context import auth_key
from tapgate.services.device_events import announce_device
from tapgate.services.devices import add_device, new_device, revoke_in
from tapgate.services.tools import announce_change, visible
from tapgate.services.vouching import announce_paired, close_pair_approvals, open_pair_approval, vouchers


@dataclass(frozen=True, slots=True)
class Claimed:
    pairing: Pairing
    device: Device
    token: str


def pairing_url(public_url: str, code: str) -> str:
    """The link a QR code carries: the code rides in the fragment, so no server log ever sees it."""
    return f"{public_url.rstrip('/')}/app/#pair={code}"


def _for_user(caller: Principal, user_id: str) -> None:
    if not caller.acts_for(user_id):
        raise NotFound(f"There is no user {user_id!r}.")


async def start(store: Store, clock: Clock, caller: Principal, user_id: str) -> Pairing:
    """Open a pairing for ``user_id``. Raises NotFound."""
    _for_user(caller, user_id)
    now = clock.now()
    pairing = new_pairing(caller.tenant_id, user_id, now)
    async with store.unit_of_work(caller.tenant_id) as uow:
        if await uow.users.get(user_id) is None:
            raise NotFound(f"There is no user {user_id!r}.")
        await uow.pairings.add(pairing)
        await uow.journal.append(
            AuditRecord(
                "pairing.started", caller.actor, subject=pairing.pairing_id, data={"user_id": user_id}
            ),
            now,
        )
    return pairing


async def get(
    store: Store, clock: Clock, caller: Principal, pairing_id: str
) -> tuple[Pairing, Device | None]:
    """The pairing as the person sees it, with the device that claimed it. Raises NotFound."""
    async with store.unit_of_work(caller.tenant_id) as uow:
        pairing = await uow.pairings.get(pairing_id)
        if pairing is None or not caller.acts_for(pairing.user_id):
            raise NotFound("There is no such pairing.")
        device = await uow.devices.by_uid(pairing.device_uid) if pairing.device_uid else None
    return pairing.current(clock.now()), device


async def open_code(store: Store, clock: Clock, caller: Principal, pairing_id: str) -> str:
    """The code of a pairing still open, to draw it again. Raises NotFound, Gone."""
    pairing, _ = await get(store, clock, caller, pairing_id)
    if pairing.status is not PairingStatus.OPEN or pairing.code is None:
        raise Gone("This pairing code was used or has expired; start a new pairing.")
    return pairing.code


async def claim_code(store: Store, clock: Clock, body: Mapping[str, Any], max_devices: int) -> Claimed:
    """A device claims a pairing code with its key and manifest. Raises NotFound, Gone, Conflict,
    InvalidInput."""
    code = parse_code(str(body.get("code", "")))
    now = clock.now()
    async with store.unit_of_work(code.tenant_id) as uow:
        pairing = await uow.pairings.get(code.pairing_id, for_update=True)
        if pairing is None:
            raise NotFound("This pairing code is not valid; ask for a new one.")
        device = new_device(code.tenant_id, pairing.user_id, body, DeviceStatus.PENDING, now)
        claimed = claim(pairing, code, device.device_uid, now)
        token = await add_device(
            uow, device, max_devices, f"device:{pairing.user_id}/{device.device_id}", "pairing.claimed"
        )
        await uow.pairings.save(claimed)
        approvers = await vouchers(uow, pairing.user_id, device.device_uid)
        if approvers:
            await open_pair_approval(uow, claimed, device, approvers, now)
    return Claimed(claimed, device, token)


async def _may_consent(
    uow: UnitOfWork, caller: Principal, pairing: Pairing, device: Device, signature_required: bool
) -> None:
    """Who may say yes with a plain consent: the operator, or anyone where no device of the user must
    vouch and no signature is required. Raises Forbidden with where to approve."""
    if caller.kind is TokenKind.OPERATOR:
        return
    if await vouchers(uow, pairing.user_id, device.device_uid):
        raise Forbidden(WHERE_TO_APPROVE)
    if signature_required or caller.require_device_signature:
        raise Forbidden(NEEDS_OPERATOR)


async def decide(
    store: Store,
    clock: Clock,
    caller: Principal,
    pairing_id: str,
    comparison_code: str,
    approved: bool,
    grants: object,
    signature_required: bool = False,
) -> Device:
    """The person confirms (with the comparison code the device shows) or declines the pairing.

    Saying yes this way is the operator's, or the user's while they have no active device and
    ``signature_required`` is off; otherwise a device the user has vouches by signing the
    ``device_pair`` approval. A wrong code counts an attempt; too many decline the pairing. What the
    answer changed is committed before a refusal is raised. Raises NotFound, Forbidden (vouching), Gone
    (expired), Conflict (not waiting for consent), ComparisonMismatch, InvalidInput (grants).
    """
    now = clock.now()
    refusal: Exception | None = None
    async with store.unit_of_work(caller.tenant_id) as uow:
        pairing = await uow.pairings.get(pairing_id, for_update=True)
        if pairing is None or not caller.acts_for(pairing.user_id):
            raise NotFound("There is no such pairing.")
        device = await uow.devices.by_uid(pairing.device_uid) if pairing.device_uid else None
        if device is None:
            raise Conflict("No device has claimed this pairing yet; scan the code on the device first.")
        if approved and pairing.current(now).status is PairingStatus.AWAITING_CONSENT:
            try:
                await _may_consent(uow, caller, pairing, device, signature_required)
            except Forbidden as e:
                record = AuditRecord(
                    "pairing.consent_refused",
                    caller.actor,
                    "refused",
                    subject=pairing_id,
                    reason=e.message[:200],
                    data={"device_id": device.device_id},
                )
                await uow.journal.append(record, now)
                refusal = e
        if refusal is None:
            try:
                decided = consent(pairing, comparison_code, approved, now)
            except Gone as e:
                decided, refusal = pairing.current(now), e
            device = await _settle(uow, caller, decided, device, grants, now)
            if decided.status is PairingStatus.AWAITING_CONSENT:
                record = AuditRecord(
                    "pairing.mismatch",
                    caller.actor,
                    "refused",
                    subject=pairing_id,
                    data={"attempts": decided.attempts},
                )
                await uow.journal.append(record, now)
                refusal = ComparisonMismatch(
                    "The comparison code does not match the one the device shows; check it and try again."
                )
            elif decided.status is PairingStatus.DECLINED and approved and refusal is None:
                refusal = ComparisonMismatch(
                    "The comparison code did not match too many times; the pairing is cancelled."
                )
    if refusal is not None:
        raise refusal
    return device


async def _settle(
    uow: UnitOfWork,
    caller: Principal,
    decided: Pairing,
    device: Device,
    grants: object,
    now: datetime,
) -> Device:
    """Store the answer and carry it out: a confirmed pairing lets the device in, an ended one revokes it."""
    await uow.pairings.save(decided)
    if decided.status is PairingStatus.CONFIRMED:
        by = "operator" if caller.kind is TokenKind.OPERATOR else "user"
        return await confirm(uow, decided, device, grants, caller.actor, by, now)
    if decided.status in (PairingStatus.DECLINED, PairingStatus.EXPIRED):
        return await cancel(uow, decided, device, caller.actor, now)
    return device


async def confirm(
    uow: UnitOfWork,
    pairing: Pairing,
    device: Device,
    grants: object,
    actor: str,
    consent_by: str,
    now: datetime,
) -> Device:
    """Let the device in: active, with the picked grants; journalled (with who consented), its
    ``device_pair`` approval closed, and the user's other devices told."""
    declared = apply_grants(device.capabilities, grants if grants is not None else [])
    await uow.devices.set_capabilities(device.device_uid, declared)
    await uow.devices.set_status(device.device_uid, DeviceStatus.ACTIVE, now)
    uow.notify(auth_key(device.tenant_id))
    device = replace(device, status=DeviceStatus.ACTIVE, capabilities=tuple(declared))
    granted = " ".join(c.name for c in device.granted())
    record = AuditRecord(
        "pairing.confirmed",
        actor,
        subject=pairing.pairing_id,
        data={"device_id": device.device_id, "granted": granted, "consent": consent_by},
    )
    await uow.journal.append(record, now)
    await announce_device(uow, device, DEVICE_PAIRED, now)
    await close_pair_approvals(uow, device.user_id, device.device_id, ApprovalStatus.APPROVED, actor, now)
    await announce_paired(uow, device, now)
    if visible(device.capabilities):
        await announce_change(uow, device.user_id, "paired", now, device_id=device.device_id)
    return device


async def cancel(uow: UnitOfWork, pairing: Pairing, device: Device, actor: str, now: datetime) -> Device:
    """The pairing ended without consent: the device that claimed it is revoked, its approval closed."""
    if device.status is not DeviceStatus.REVOKED:
        await revoke_in(uow, device, now, actor, f"pairing.{pairing.status.value}")
    await close_pair_approvals(uow, device.user_id, device.device_id, ApprovalStatus.DENIED, actor, now)
    return replace(device, status=DeviceStatus.REVOKED)
