"""Devices: enrol, list, grant, revoke, re-declare, and every device request's revalidation."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from tapgate.domain.accounts import Credential
from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import (
    APPROVALS,
    BROWSER_APP,
    Declared,
    Device,
    DeviceStatus,
    apply_grants,
    check_device_id,
    check_device_kind,
    check_device_name,
    check_push,
    grants_lost,
    parse_manifest,
    read_grants,
    redeclare,
    self_marked,
)
from tapgate.domain.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthenticated
from tapgate.domain.events import (
    DEVICE_CAPABILITIES_CHANGED,
    DEVICE_OFFLINE,
    DEVICE_ONLINE,
    DEVICE_PAIRED,
    DEVICE_REVOKED,
)
from tapgate.domain.grant_requests import grants_note
from tapgate.domain.keys import canonical_public_key, load_public_key
from tapgate.domain.pairing import PAIRING_TTL
from tapgate.domain.principals import SCOPES_BY_KIND, Principal, Scope, TokenKind
from tapgate.domain.tokens import issue_token
from tapgate.ports import Clock, Store, UnitOfWork
from tapgate.services.console import end_sessions_signed_by
from tapgate.services.context import auth_key
from tapgate.services.device_events import announce_device
from tapgate.services.endings import fail_open
from tapgate.services.grant_requests import ask_for_grants
from tapgate.services.tools import announce_change, visible


@dataclass(frozen=True, slots=True)
class DeviceCaller:
    """A device request that passed revalidation: the token's principal and the device as it is now."""

    principal: Principal
    device: Device


@dataclass(frozen=True, slots=True)
class NewDevice:
    device: Device
    token: str


def new_device(
    tenant_id: str, user_id: str, body: Mapping[str, Any], status: DeviceStatus, now: datetime
) -> Device:
    """A device from an enrolment or pairing body. Raises InvalidInput naming the bad field."""
    key = load_public_key(str(body.get("alg")), str(body.get("public_key", "")))
    declared = parse_manifest(body.get("capabilities", []))
    return Device(
        tenant_id=tenant_id,
        user_id=user_id,
        device_uid=secrets.token_hex(8),
        device_id=check_device_id(body.get("device_id")),
        name=check_device_name(body.get("name")),
        kind=check_device_kind(body.get("kind")),
        alg=str(body.get("alg")),
        public_key=canonical_public_key(key),
        status=status,
        created_at=now,
        push=check_push(body.get("push")),
        capabilities=tuple(apply_grants(declared, body.get("grants"))),
        app=BROWSER_APP if body.get("app") == BROWSER_APP else None,
    )


async def add_device(uow: UnitOfWork, device: Device, max_devices: int, actor: str, action: str) -> str:
    """Store ``device`` with its token, within the user's device limit; return the token (shown once)."""
    if await uow.users.get(device.user_id) is None:
        raise NotFound(f"There is no user {device.user_id!r}.")
    if await uow.devices.count_live(device.user_id) >= max_devices:
        raise Conflict(
            f"User {device.user_id!r} has {max_devices} devices, the most allowed; remove one first."
        )
    issued = issue_token(TokenKind.DEVICE, device.tenant_id)
    await uow.devices.add(device)
    await uow.credentials.add(
        Credential(
            device.tenant_id,
            issued.credential_id,
            TokenKind.DEVICE,
            issued.secret_hash,
            SCOPES_BY_KIND[TokenKind.DEVICE],
            device.created_at,
            user_id=device.user_id,
            device_uid=device.device_uid,
        )
    )
    await uow.journal.append(
        AuditRecord(
            action,
            actor,
            subject=device.device_id,
            data={
                "user_id": device.user_id,
                "device_uid": device.device_uid,
                "alg": device.alg,
                "capabilities": len(device.capabilities),
                "granted": " ".join(c.name for c in device.granted()),
            },
        ),
        device.created_at,
    )
    return issued.token


async def enrol(
    store: Store, clock: Clock, caller: Principal, user_id: str, body: Mapping[str, Any], max_devices: int
) -> NewDevice:
    """The operator enrols a device for a user. Raises InvalidInput, NotFound, Conflict."""
    now = clock.now()
    device = new_device(caller.tenant_id, user_id, body, DeviceStatus.ACTIVE, now)
    async with store.unit_of_work(caller.tenant_id) as uow:
        token = await add_device(uow, device, max_devices, caller.actor, "device.enrolled")
        await announce_device(uow, device, DEVICE_PAIRED, now)
        if visible(device.capabilities):
            await announce_change(uow, user_id, "enrolled", now, device_id=device.device_id)
    return NewDevice(device, token)


def _for_user(caller: Principal, user_id: str) -> None:
    # Another user's devices look exactly like devices that do not exist.
    if not caller.acts_for(user_id):
        raise NotFound(f"There is no user {user_id!r}.")


async def _expire_unconfirmed(uow: UnitOfWork, devices: Sequence[Device], now: datetime) -> list[Device]:
    live = []
    for device in devices:
        if device.status is DeviceStatus.PENDING and now >= device.created_at + PAIRING_TTL:
            await uow.devices.set_status(device.device_uid, DeviceStatus.REVOKED, now)
            await uow.credentials.revoke_device(device.device_uid, now)
            uow.notify(auth_key(device.tenant_id))
            continue
        live.append(device)
    return live


async def list_devices(store: Store, clock: Clock, caller: Principal, user_id: str) -> list[Device]:
    _for_user(caller, user_id)
    async with store.unit_of_work(caller.tenant_id) as uow:
        if await uow.users.get(user_id) is None:
            raise NotFound(f"There is no user {user_id!r}.")
        return await _expire_unconfirmed(uow, await uow.devices.list(user_id), clock.now())


async def _live_device(uow: UnitOfWork, user_id: str, device_id: str) -> Device:
    device = await uow.devices.get(user_id, device_id)
    if device is None:
        raise NotFound(f"User {user_id!r} has no device {device_id!r}.")
    return device


async def set_grants(
    store: Store, clock: Clock, caller: Principal, user_id: str, device_id: str, given: object
) -> Device:
    """The person grants or withdraws capabilities: ``given`` in either shape of ``read_grants`` (a list
    grants the names it holds, an object sets each name it holds); others keep theirs. Raises NotFound,
    InvalidInput."""
    _for_user(caller, user_id)
    grants = read_grants(given)
    now = clock.now()
    async with store.unit_of_work(caller.tenant_id) as uow:
        device = await _live_device(uow, user_id, device_id)
        return await change_grants(uow, caller.actor, device, grants, now)


async def change_grants(
    uow: UnitOfWork, actor: str, device: Device, grants: Mapping[str, bool], now: datetime
) -> Device:
    """Grant (``True``) or withdraw (``False``) each capability ``grants`` names, as the person: the
    console, the user, an operator, or an approver's signed ``grant``. Journalled, announced to the
    device, and a ``tools.changed`` when the agents' tools differ. Raises InvalidInput for a name the
    device does not declare."""
    names = {d.capability.name for d in device.capabilities}
    for name in grants:
        if name not in names:
            raise InvalidInput("grants", f"grants: device {device.device_id!r} does not declare {name!r}.")
    updated = [Declared(d.capability, grants.get(d.capability.name, d.granted)) for d in device.capabilities]
    await uow.devices.set_capabilities(device.device_uid, updated)
    before = {d.capability.name: d.granted for d in device.capabilities}
    changes = {n: g for n, g in grants.items() if before[n] != g}
    await uow.journal.append(
        AuditRecord(
            "grants.changed",
            actor,
            subject=device.device_id,
            data={
                "user_id": device.user_id,
                "granted": " ".join(sorted(n for n, g in changes.items() if g)),
                "withdrawn": " ".join(sorted(n for n, g in changes.items() if not g)),
            },
        ),
        now,
    )
    if changes:
        await announce_device(uow, device, DEVICE_CAPABILITIES_CHANGED, now)
    if changes.get(APPROVALS) is False:  # no longer an approver: the sessions it signed in end with it
        await end_sessions_signed_by(uow, device, actor, now)
    if visible(updated) != visible(device.capabilities):
        await announce_change(uow, device.user_id, "grants", now, device_id=device.device_id)
    return device.with_capabilities(updated)


async def revoke(store: Store, clock: Clock, caller: Principal, user_id: str, device_id: str) -> None:
    """Revoke a device: its token dies and its tools vanish at once. Raises NotFound."""
    _for_user(caller, user_id)
    now = clock.now()
    async with store.unit_of_work(caller.tenant_id) as uow:
        device = await _live_device(uow, user_id, device_id)
        await revoke_in(uow, device, now, caller.actor, "device.revoked")


async def revoke_in(uow: UnitOfWork, device: Device, now: datetime, actor: str, action: str) -> None:
    if device.status is DeviceStatus.ACTIVE and visible(device.capabilities):
        await announce_change(uow, device.user_id, "revoked", now, device_id=device.device_id)
    await uow.devices.set_status(device.device_uid, DeviceStatus.REVOKED, now)
    await uow.credentials.revoke_device(device.device_uid, now)
    await end_sessions_signed_by(uow, device, actor, now)
    uow.notify(auth_key(device.tenant_id))  # every process forgets the device's token at once
    if device.status is DeviceStatus.ACTIVE:  # a pairing declined before it began is no device's end
        await announce_device(uow, device, DEVICE_REVOKED, now)
    await fail_open(uow, device.device_uid, actor, now)
    await uow.journal.append(
        AuditRecord(
            action,
            actor,
            subject=device.device_id,
            data={"user_id": device.user_id, "device_uid": device.device_uid},
        ),
        now,
    )


async def authenticate_device(
    store: Store, clock: Clock, principal: Principal, present: bool = True
) -> DeviceCaller:
    """Revalidate a device token's device (active, not revoked) and mark it present (unless ``present``
    is False: a link that opens marks it in the same write as its hold).

    Raises Unauthenticated for a revoked or unknown device, Forbidden for one awaiting consent.
    """
    if principal.kind is not TokenKind.DEVICE or principal.device_uid is None:
        raise Forbidden(f"This needs a device token; this {principal.kind} token cannot do it.")
    now = clock.now()
    async with store.unit_of_work(principal.tenant_id) as uow:
        device = await uow.devices.by_uid(principal.device_uid)
        if device is None or device.status is DeviceStatus.REVOKED:
            raise Unauthenticated("This device was removed; pair it again.")
        if device.status is DeviceStatus.PENDING:
            raise Forbidden("This device waits for the person to confirm the pairing.")
        if present:
            await uow.devices.touch(device.device_uid, now)
    caller = replace(principal, device_id=device.device_id)
    return DeviceCaller(caller, replace(device, last_seen_at=now))


@dataclass(frozen=True, slots=True)
class Redeclared:
    device: Device
    asked: list[str]  # self-marked grants that now wait for the person's approvers
    unasked: list[str]  # self-marked grants no approver was asked for: the person grants them elsewhere

    @property
    def note(self) -> str | None:
        return grants_note(self.asked, self.unasked)


async def redeclare_capabilities(
    store: Store, clock: Clock, caller: DeviceCaller, entries: object, window: int
) -> Redeclared:
    """The device re-declares its capabilities; each it marks ``granted: true`` that the person has not
    granted becomes a ``grant`` approval open ``window`` seconds. Raises InvalidInput."""
    new = parse_manifest(entries, allow_granted=True)
    now = clock.now()
    async with store.unit_of_work(caller.principal.tenant_id) as uow:
        device = await uow.devices.by_uid(caller.device.device_uid)
        if device is None or device.status is not DeviceStatus.ACTIVE:
            raise Unauthenticated("This device was removed; pair it again.")
        merged = redeclare(device.capabilities, new)
        await uow.devices.set_capabilities(device.device_uid, merged)
        updated = device.with_capabilities(merged)
        marked = [c.name for c in self_marked(merged, new)]
        asked = await ask_for_grants(uow, updated, merged, self_marked(merged, new), window, now)
        before, after = {d.capability.name for d in device.capabilities}, {d.capability.name for d in merged}
        await uow.journal.append(
            AuditRecord(
                "device.capabilities_declared",
                caller.principal.actor,
                subject=device.device_id,
                data={
                    "added": " ".join(sorted(after - before)),
                    "removed": " ".join(sorted(before - after)),
                    "granted": " ".join(sorted(d.capability.name for d in merged if d.granted)),
                    "grants_removed": " ".join(grants_lost(device.capabilities, new)),
                    "grants_asked": " ".join(asked),
                },
            ),
            now,
        )
        if _manifest(merged) != _manifest(device.capabilities):
            await announce_device(uow, device, DEVICE_CAPABILITIES_CHANGED, now)
        if visible(merged) != visible(device.capabilities):
            await announce_change(uow, device.user_id, "capabilities", now, device_id=device.device_id)
    return Redeclared(updated, asked, [n for n in marked if n not in asked])


def _manifest(declared: Sequence[Declared]) -> list[tuple[dict[str, Any], bool]]:
    return [(d.capability.as_dict(), d.granted) for d in declared]


def require_device_scope(caller: DeviceCaller, scope: Scope) -> None:
    caller.principal.require(TokenKind.DEVICE, scope=scope)


async def hold_link(store: Store, clock: Clock, caller: DeviceCaller, seconds: float | None) -> None:
    until = None if seconds is None else clock.now() + timedelta(seconds=seconds)
    async with store.unit_of_work(caller.principal.tenant_id) as uow:
        await uow.devices.set_link(caller.device.device_uid, until)


async def open_link(store: Store, clock: Clock, caller: DeviceCaller, seconds: float) -> None:
    """A live link opened: mark the device present and hold the link for ``seconds``; ``device.online``
    when the device had none."""
    now = clock.now()
    async with store.unit_of_work(caller.principal.tenant_id) as uow:
        device = await uow.devices.by_uid(caller.device.device_uid)
        await uow.devices.touch(caller.device.device_uid, now)
        await uow.devices.set_link(caller.device.device_uid, now + timedelta(seconds=seconds))
        if device is not None and not device.live(now):
            await announce_device(uow, device, DEVICE_ONLINE, now)


async def close_link(store: Store, clock: Clock, caller: DeviceCaller) -> None:
    """A live link closed: the device is offline (``device.offline``) unless it is being removed."""
    now = clock.now()
    async with store.unit_of_work(caller.principal.tenant_id) as uow:
        device = await uow.devices.by_uid(caller.device.device_uid)
        await uow.devices.set_link(caller.device.device_uid, None)
        if device is not None and device.status is DeviceStatus.ACTIVE:
            await announce_device(uow, device, DEVICE_OFFLINE, now)


async def touch(store: Store, clock: Clock, caller: DeviceCaller) -> None:
    async with store.unit_of_work(caller.principal.tenant_id) as uow:
        await uow.devices.touch(caller.device.device_uid, clock.now())
