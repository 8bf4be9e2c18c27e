"""Devices, pairings and passkeys on SQLite and PostgreSQL; every statement names its tenant."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.sql_base import Repo, insert_into
from tapgate.domain.console import ALL_AGENTS
from tapgate.domain.devices import (
    Capability,
    Declared,
    Device,
    DeviceStatus,
    Presence,
    PushTarget,
    parse_capability,
)
from tapgate.domain.errors import Conflict
from tapgate.domain.pairing import Pairing, PairingStatus
from tapgate.domain.passkeys import Passkey


@functools.lru_cache(maxsize=4096)
def _stored_capability(definition: str) -> Capability:
    """A stored capability, parsed once per distinct definition (they were checked on the way in)."""
    return parse_capability(json.loads(definition), "stored").capability


def _first_device(rows: Sequence[Any]) -> Device | None:
    """The first device of ``rows`` (``*_WITH_CAPABILITIES``), with its capabilities."""
    if not rows:
        return None
    first = rows[0]
    declared = tuple(
        Declared(_stored_capability(r.definition), r.granted)
        for r in rows
        if r.device_uid == first.device_uid and r.definition is not None
    )
    return _device(first, declared)


def _device(r: Any, capabilities: tuple[Declared, ...]) -> Device:
    return Device(
        tenant_id=r.tenant_id,
        user_id=r.user_id,
        device_uid=r.device_uid,
        device_id=r.device_id,
        name=r.name,
        kind=r.kind,
        alg=r.alg,
        public_key=r.public_key,
        status=DeviceStatus(r.status),
        created_at=r.created_at,
        push=PushTarget(r.push_kind, r.push_token) if r.push_kind else None,
        last_seen_at=r.last_seen_at,
        revoked_at=r.revoked_at,
        capabilities=capabilities,
        link_until=r.link_until,
        app=r.app,
    )


class SqlDevices(Repo):
    async def add(self, device: Device) -> None:
        row = {
            "tenant_id": device.tenant_id,
            "device_uid": device.device_uid,
            "user_id": device.user_id,
            "device_id": device.device_id,
            "name": device.name,
            "kind": device.kind,
            "alg": device.alg,
            "public_key": device.public_key,
            "status": device.status.value,
            "push_kind": device.push.kind if device.push else None,
            "push_token": device.push.token if device.push else None,
            "created_at": device.created_at,
            "last_seen_at": device.last_seen_at,
            "revoked_at": device.revoked_at,
            "app": device.app,
        }
        await self._insert(
            t.devices,
            row,
            f"User {device.user_id!r} has a device {device.device_id!r} already; pick another id.",
        )
        await self.set_capabilities(device.device_uid, device.capabilities)

    async def _load(self, statement: Any, **values: Any) -> list[Device]:
        rows = (await self.conn.execute(statement, {"tenant": self.tenant_id, **values})).all()
        if not rows:
            return []
        declared: dict[str, list[Declared]] = {r.device_uid: [] for r in rows}
        if len(declared) == 1:  # the usual case, and a statement built once for every engine
            found = {"tenant": self.tenant_id, "uid": rows[0].device_uid}
            caps = await self.conn.execute(q.CAPABILITIES_OF, found)
        else:
            caps = await self.conn.execute(q.CAPABILITIES, {"tenant": self.tenant_id, "uids": list(declared)})
        for cap in caps:
            declared[cap.device_uid].append(Declared(_stored_capability(cap.definition), cap.granted))
        return [_device(r, tuple(declared[r.device_uid])) for r in rows]

    async def _load_one(self, statement: Any, **values: Any) -> Device | None:
        """The first device ``statement`` finds, with its capabilities (``*_WITH_CAPABILITIES``)."""
        return _first_device((await self.conn.execute(statement, {"tenant": self.tenant_id, **values})).all())

    async def get(self, user_id: str, device_id: str) -> Device | None:
        return await self._load_one(q.LIVE_DEVICE_WITH_CAPABILITIES, user=user_id, device=device_id)

    async def get_with_pause(
        self, user_id: str, device_id: str, agent_id: str = ALL_AGENTS
    ) -> tuple[Device | None, datetime | None, datetime | None]:
        values = {
            "tenant": self.tenant_id,
            "user": user_id,
            "device": device_id,
            "agent": ALL_AGENTS,
            "caller": agent_id,
        }
        rows = (await self.conn.execute(q.LIVE_DEVICE_WITH_PAUSE, values)).all()
        if not rows:  # no such device: the call is refused unless every agent is paused, which says so
            until = await self.conn.scalar(q.PAUSED_UNTIL, values)
            return None, until if isinstance(until, datetime) else None, None
        until, agent = rows[0].paused_until, rows[0].agent_paused_until
        return (
            _first_device(rows),
            until if isinstance(until, datetime) else None,
            agent if isinstance(agent, datetime) else None,
        )

    async def by_uid(self, device_uid: str) -> Device | None:
        return await self._load_one(q.DEVICE_BY_UID_WITH_CAPABILITIES, uid=device_uid)

    async def presence(self, device_uid: str) -> Presence | None:
        found = (
            await self.conn.execute(q.DEVICE_PRESENCE, {"tenant": self.tenant_id, "uid": device_uid})
        ).first()
        if found is None:
            return None
        return Presence(DeviceStatus(found.status), found.link_until, found.push_kind is not None)

    async def list(self, user_id: str) -> Sequence[Device]:
        return await self._load(q.LIVE_DEVICES, user=user_id)

    async def ever(self, user_id: str, device_id: str) -> bool:
        c = t.devices.c
        found = await self.conn.scalar(
            self.scoped(select(c.device_uid)).where(c.user_id == user_id, c.device_id == device_id).limit(1)
        )
        return found is not None

    async def count_live(self, user_id: str) -> int:
        c = t.devices.c
        count = await self.conn.scalar(
            self.scoped(select(func.count()), over=t.devices).where(c.user_id == user_id, q.LIVE)
        )
        return int(count or 0)

    async def set_capabilities(self, device_uid: str, capabilities: Sequence[Declared]) -> None:
        k = t.capabilities.c
        await self.conn.execute(self.scoped(delete(t.capabilities)).where(k.device_uid == device_uid))
        if capabilities:
            await self.conn.execute(
                insert(t.capabilities),
                [
                    {
                        "tenant_id": self.tenant_id,
                        "device_uid": device_uid,
                        "name": d.capability.name,
                        "position": i,
                        "definition": json.dumps(d.capability.as_dict()),  # keeps the params in order
                        "granted": d.granted,
                    }
                    for i, d in enumerate(capabilities)
                ],
            )

    async def set_status(self, device_uid: str, status: DeviceStatus, at: datetime) -> None:
        c = t.devices.c
        values: dict[str, Any] = {"status": status.value}
        if status is DeviceStatus.REVOKED:
            values["revoked_at"] = at
        await self.conn.execute(
            self.scoped(update(t.devices)).where(c.device_uid == device_uid).values(values)
        )

    async def set_link(self, device_uid: str, until: datetime | None) -> None:
        await self.conn.execute(q.LINK_DEVICE, {"tenant": self.tenant_id, "uid": device_uid, "until": until})

    async def hold_links(self, device_uids: Sequence[str], until: datetime) -> None:
        if device_uids:
            c = t.devices.c
            await self.conn.execute(
                self.scoped(update(t.devices)).where(c.device_uid.in_(device_uids)).values(link_until=until)
            )

    async def set_push(self, device_uid: str, target: PushTarget | None) -> None:
        c = t.devices.c
        await self.conn.execute(
            self.scoped(update(t.devices))
            .where(c.device_uid == device_uid)
            .values(push_kind=target.kind if target else None, push_token=target.token if target else None)
        )

    async def touch(self, device_uid: str, at: datetime) -> None:
        await self.conn.execute(q.TOUCH_DEVICE, {"tenant": self.tenant_id, "uid": device_uid, "at": at})


class SqlPairings(Repo):
    @staticmethod
    def _row(p: Pairing) -> dict[str, Any]:
        return {
            "tenant_id": p.tenant_id,
            "pairing_id": p.pairing_id,
            "user_id": p.user_id,
            "code_hash": p.code_hash,
            "code": p.code,
            "status": p.status.value,
            "created_at": p.created_at,
            "expires_at": p.expires_at,
            "device_uid": p.device_uid,
            "comparison_code": p.comparison_code,
            "attempts": p.attempts,
            "decided_at": p.decided_at,
        }

    async def add(self, pairing: Pairing) -> None:
        await self._insert(t.pairings, self._row(pairing), "That pairing exists already.")

    async def get(self, pairing_id: str, for_update: bool = False) -> Pairing | None:
        c = t.pairings.c
        query = self.scoped(select(t.pairings)).where(c.pairing_id == pairing_id)
        r = (await self.conn.execute(query.with_for_update() if for_update else query)).first()
        if r is None:
            return None
        return Pairing(
            tenant_id=r.tenant_id,
            pairing_id=r.pairing_id,
            user_id=r.user_id,
            code_hash=r.code_hash,
            status=PairingStatus(r.status),
            created_at=r.created_at,
            expires_at=r.expires_at,
            code=r.code,
            device_uid=r.device_uid,
            comparison_code=r.comparison_code,
            attempts=r.attempts,
            decided_at=r.decided_at,
        )

    async def save(self, pairing: Pairing) -> None:
        c = t.pairings.c
        await self.conn.execute(
            self.scoped(update(t.pairings))
            .where(c.pairing_id == pairing.pairing_id)
            .values(self._row(pairing))
        )


class SqlPasskeys(Repo):
    async def add(self, passkey: Passkey) -> None:
        found = await self.get(passkey.credential_id)
        if found is not None:
            if found.device_uid != passkey.device_uid:
                raise Conflict("This passkey is registered for another device.")
            return
        row = {
            "tenant_id": self.tenant_id,
            "credential_id": passkey.credential_id,
            "device_uid": passkey.device_uid,
            "user_id": passkey.user_id,
            "public_key": passkey.public_key,
            "sign_count": passkey.sign_count,
            "created_at": passkey.created_at,
        }
        await self._insert(t.passkeys, row, "This passkey is registered already.")

    async def get(self, credential_id: str) -> Passkey | None:
        c = t.passkeys.c
        row = (
            await self.conn.execute(self.scoped(select(t.passkeys)).where(c.credential_id == credential_id))
        ).first()
        return _passkey(row) if row is not None else None

    async def for_device(self, device_uid: str) -> Sequence[Passkey]:
        c = t.passkeys.c
        rows = await self.conn.execute(
            self.scoped(select(t.passkeys)).where(c.device_uid == device_uid).order_by(c.created_at)
        )
        return [_passkey(row) for row in rows]

    async def set_sign_count(self, credential_id: str, sign_count: int) -> None:
        c = t.passkeys.c
        await self.conn.execute(
            self.scoped(update(t.passkeys))
            .where(c.credential_id == credential_id)
            .values(sign_count=sign_count)
        )

    async def required(self, user_id: str) -> bool | None:
        c = t.passkey_users.c
        found = await self.conn.scalar(self.scoped(select(c.required)).where(c.user_id == user_id))
        return None if found is None else bool(found)

    async def set_required(self, user_id: str, required: bool | None) -> None:
        c = t.passkey_users.c
        await self.conn.execute(self.scoped(delete(t.passkey_users)).where(c.user_id == user_id))
        if required is not None:
            await self.conn.execute(
                insert_into(t.passkey_users),
                self.owned({"user_id": user_id, "required": required}),
            )


def _passkey(row: Any) -> Passkey:
    return Passkey(
        tenant_id=row.tenant_id,
        credential_id=row.credential_id,
        device_uid=row.device_uid,
        user_id=row.user_id,
        public_key=row.public_key,
        sign_count=int(row.sign_count),
        created_at=row.created_at,
    )
