"""Reading and verifying the audit journal."""

from __future__ import annotations

from collections.abc import Sequence

from tapgate.domain.audit import GENESIS, AuditEntry, BrokenChain, verify_chain
from tapgate.domain.errors import InvalidInput, NotFound
from tapgate.ports import Store

_PAGE = 1000


async def read_audit(store: Store, tenant_id: str, after: int, limit: int) -> Sequence[AuditEntry]:
    """One page of a tenant's journal. Raises InvalidInput for a bad window."""
    if after < 0:
        raise InvalidInput("after", "after must be 0 or a sequence number from an earlier page.")
    if not 1 <= limit <= _PAGE:
        raise InvalidInput("limit", f"limit must be between 1 and {_PAGE}.")
    async with store.unit_of_work(tenant_id) as uow:
        return await uow.journal.read(after, limit)


async def verify_audit(store: Store, tenant_id: str) -> int:
    """Walk a tenant's whole chain; return the entry count or raise BrokenChain."""

    async def pages() -> list[AuditEntry]:
        out: list[AuditEntry] = []
        after = 0
        while True:
            async with store.unit_of_work(tenant_id) as uow:
                page = await uow.journal.read(after, _PAGE)
            out.extend(page)
            if len(page) < _PAGE:
                return out
            after = page[-1].seq

    async with store.unit_of_work(tenant_id) as uow:
        head = await uow.journal.head()
    if head is None:
        raise NotFound(f"There is no tenant {tenant_id!r}.")
    entries = await pages()
    count = verify_chain(tenant_id, entries)
    last = entries[-1].hash if entries else GENESIS
    if (count, last) != head:
        # Entries cut from the end leave a chain that verifies on its own: the head says how long it was.
        raise BrokenChain(tenant_id, count + 1, "is missing: the journal ends before its recorded head")
    return count
