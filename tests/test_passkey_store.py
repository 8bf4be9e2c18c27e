"""The passkeys' part of the Store contract, on every adapter (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import pytest

from tapgate.domain.errors import Conflict
from tapgate.domain.passkeys import Passkey
from tapgate.ports import Store
from tests.test_outbox_store import NOW, _tenant_with_devices


def _passkey(tenant: str, uid: str, user: str, credential_id: str = "cred-1") -> Passkey:
    return Passkey(tenant, credential_id, uid, user, "cose-key", 0, NOW)


async def test_a_passkey_round_trips_counts_forward_and_stays_in_its_tenant(store: Store) -> None:
    tenant, uids = await _tenant_with_devices(store, "ana", "bob")
    other, _ = await _tenant_with_devices(store, "ana")
    async with store.unit_of_work(tenant) as uow:
        await uow.passkeys.add(_passkey(tenant, uids["ana"], "ana"))
        await uow.passkeys.add(_passkey(tenant, uids["ana"], "ana"))  # the same again: kept once
        await uow.passkeys.set_sign_count("cred-1", 7)
    async with store.unit_of_work(tenant) as uow:
        found = await uow.passkeys.get("cred-1")
        assert found == Passkey(tenant, "cred-1", uids["ana"], "ana", "cose-key", 7, NOW)
        assert [p.credential_id for p in await uow.passkeys.for_device(uids["ana"])] == ["cred-1"]
        assert await uow.passkeys.for_device(uids["bob"]) == []
    async with store.unit_of_work(other) as uow:
        assert await uow.passkeys.get("cred-1") is None
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.passkeys.add(_passkey(tenant, uids["bob"], "bob"))  # another device's credential


async def test_a_users_own_verification_setting_is_set_and_cleared(store: Store) -> None:
    tenant, _ = await _tenant_with_devices(store, "ana", "bob")
    async with store.unit_of_work(tenant) as uow:
        assert await uow.passkeys.required("ana") is None
        await uow.passkeys.set_required("ana", True)
        await uow.passkeys.set_required("bob", False)
    async with store.unit_of_work(tenant) as uow:
        assert (await uow.passkeys.required("ana"), await uow.passkeys.required("bob")) == (True, False)
        await uow.passkeys.set_required("ana", None)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.passkeys.required("ana") is None
