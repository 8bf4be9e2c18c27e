"""Reading and verifying the audit journal."""

from __future__ import annotations

from collections.abc import Sequence

from tapgate.domain.audit import GENESIS, AuditEntry, verify_chain
from tapgate.domain.errors import BrokenChain, InvalidInput, NotFound
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
    """Walk a tenant's whole chain; return the entry count or raise BrokenChain (NotFound: no tenant)."""
    return (await _verify_after(store, tenant_id, (0, GENESIS)))[0]


class VerifiedMarks:
    """The last entry of each tenant's chain this process verified (its number and hash), so that a check
    reads only what came after it."""

    def __init__(self) -> None:
        self._marks: dict[str, tuple[int, str]] = {}

    async def verify(self, store: Store, tenant_id: str) -> int:
        """Verify a tenant's chain from the last entry verified here to its head; return the entry count.
        An entry before the mark is not read again (``verify_audit`` reads them all). Raises BrokenChain
        (the mark stays where it was), NotFound."""
        verified = await _verify_after(store, tenant_id, self._marks.get(tenant_id, (0, GENESIS)))
        self._marks[tenant_id] = verified
        return verified[0]


async def _head(store: Store, tenant_id: str) -> tuple[int, str]:
    async with store.unit_of_work(tenant_id) as uow:
        head = await uow.journal.head()
    if head is None:
        raise NotFound(f"There is no tenant {tenant_id!r}.")
    return head


async def _verify_after(store: Store, tenant_id: str, mark: tuple[int, str]) -> tuple[int, str]:
    """Verify the entries after ``mark`` up to the head read first (entries written meanwhile wait for
    the next check); return that head, now verified."""
    head = await _head(store, tenant_id)
    if head[0] < mark[0]:
        raise BrokenChain(tenant_id, head[0] + 1, "is missing: the journal ends before an entry verified")
    entries: list[AuditEntry] = []
    after = mark[0]
    while after < head[0]:
        async with store.unit_of_work(tenant_id) as uow:
            page = await uow.journal.read(after, min(_PAGE, head[0] - after))
        if not page:
            break
        entries.extend(page)
        after = page[-1].seq
    count = verify_chain(tenant_id, entries, mark)
    last = entries[-1].hash if entries else mark[1]
    if (count, last) != head:
        # Entries cut from the end leave a chain that verifies on its own: the head says how long it was.
        raise BrokenChain(tenant_id, count + 1, "is missing: the journal ends before its recorded head")
    return head
