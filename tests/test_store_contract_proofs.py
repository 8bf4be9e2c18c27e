"""The Store contract for proofs, on the memory store, SQLite and PostgreSQL: issuer keys per tenant,
newest first and added once; a decision's signature kept with its approval; and the journal entries of
one action about one subject, numbered and hashed as the chain has them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tapgate.domain.accounts import Tenant, User
from tapgate.domain.approvals import new_sign_block
from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import Conflict
from tapgate.domain.inbox import Approval, ApprovalStatus
from tapgate.domain.proofs import SignedDecision, new_issuer_key
from tapgate.ports import Store
from tests.conftest import tenant_name

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


async def _world(store: Store) -> str:
    tenant = tenant_name()
    async with store.unit_of_work(tenant) as uow:
        await uow.tenants.add(Tenant(tenant, tenant, NOW))
        await uow.users.add(User(tenant, "ana", "Ana", NOW))
    return tenant


def _approval(tenant: str, approval_id: str) -> Approval:
    return Approval(
        tenant_id=tenant,
        approval_id=approval_id,
        user_id="ana",
        agent_id="assistant",
        invocation_id=None,
        kind="mandate",
        subject="mnd_1",
        prompt="p",
        preview={"kind": "mandate", "fields": []},
        sign=new_sign_block("0" * 64, NOW, 60),
        binding_code="ACDE",
        status=ApprovalStatus.PENDING,
        created_at=NOW,
        expires_at=NOW + timedelta(minutes=1),
    )


async def test_issuer_keys_are_the_tenants_own_newest_first_and_added_once(store: Store) -> None:
    tenant, other = await _world(store), await _world(store)
    first, second = new_issuer_key(NOW), new_issuer_key(NOW + timedelta(days=1))
    async with store.unit_of_work(tenant) as uow:
        assert await uow.proofs.issuer_keys() == []
        await uow.proofs.add_issuer_key(first)
        await uow.proofs.add_issuer_key(second)
    async with store.unit_of_work(tenant) as uow:
        assert [k.kid for k in await uow.proofs.issuer_keys()] == [second.kid, first.kid]
        assert (await uow.proofs.issuer_keys())[1].private_jwk == first.private_jwk
    async with store.unit_of_work(other) as uow:
        assert await uow.proofs.issuer_keys() == []
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.proofs.add_issuer_key(first)


async def test_a_decisions_signature_is_kept_once_with_its_approval(store: Store) -> None:
    tenant, other = await _world(store), await _world(store)
    signed = SignedDecision("apr_1", "ana-phone", "ed25519", "a2V5", "c2ln")
    async with store.unit_of_work(tenant) as uow:
        await uow.approvals.add(_approval(tenant, "apr_1"))
        assert await uow.proofs.signature("apr_1") is None
        await uow.proofs.keep_signature(signed)
    async with store.unit_of_work(tenant) as uow:
        assert await uow.proofs.signature("apr_1") == signed
    async with store.unit_of_work(other) as uow:
        assert await uow.proofs.signature("apr_1") is None
    with pytest.raises(Conflict):
        async with store.unit_of_work(tenant) as uow:
            await uow.proofs.keep_signature(signed)


async def test_the_journal_finds_the_entries_of_one_action_about_one_subject_as_numbered(
    store: Store,
) -> None:
    tenant = await _world(store)
    async with store.unit_of_work(tenant) as uow:
        await uow.journal.append(AuditRecord("approval.decided", "device:p", subject="apr_1"), NOW)
        await uow.journal.append(AuditRecord("approval.decided", "device:p", subject="apr_2"), NOW)
        await uow.journal.append(AuditRecord("mandate.used", "agent:a", subject="apr_1"), NOW)
    async with store.unit_of_work(tenant) as uow:
        await uow.journal.append(AuditRecord("approval.decided", "device:p", subject="apr_1"), NOW)
    async with store.unit_of_work(tenant) as uow:
        found = await uow.journal.find("approval.decided", "apr_1")
        every = {e.seq: e for e in await uow.journal.read(0, 100)}
    assert len(found) == 2 and found[0].seq < found[1].seq
    assert [(e.seq, e.hash) for e in found] == [(e.seq, every[e.seq].hash) for e in found]
    assert all(e.action == "approval.decided" and e.subject == "apr_1" for e in found)
