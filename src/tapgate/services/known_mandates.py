"""The live mandates this process last read for each person, so that a covered call checks its bounds
without reading them again.

Only a hint, never the word on a use: the use itself is taken by the store's one conditional statement,
which refuses a mandate revoked, expired or spent since it was read here (the call then reads afresh),
and a call that no known mandate covers reads afresh too, so a mandate signed since is never missed. A
mandate's bounds never change once asked; only its counts and status do, and those the statement checks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from tapgate.domain.mandates import Mandate

PEOPLE = 10_000  # the most people whose mandates one process keeps; the longest unused go first


class KnownMandates:
    def __init__(self, people: int = PEOPLE) -> None:
        self._people = people
        self._known: OrderedDict[tuple[str, str], tuple[Mandate, ...]] = OrderedDict()

    def of(self, tenant_id: str, user_id: str) -> tuple[Mandate, ...]:
        """The person's mandates as last read here (none if not read, or forgotten)."""
        key = (tenant_id, user_id)
        known = self._known.get(key, ())
        if known:
            self._known.move_to_end(key)
        return known

    def read(self, tenant_id: str, user_id: str, live: Sequence[Mandate]) -> None:
        """The person's live mandates as the store has them now."""
        key = (tenant_id, user_id)
        if not live:
            self._known.pop(key, None)
            return
        self._known[key] = tuple(live)
        self._known.move_to_end(key)
        if len(self._known) > self._people:
            self._known.popitem(last=False)

    def spent(self, tenant_id: str, user_id: str, mandate_id: str) -> None:
        """The store refused a use of ``mandate_id``: it is not tried again before the next read."""
        key = (tenant_id, user_id)
        rest = tuple(m for m in self._known.get(key, ()) if m.mandate_id != mandate_id)
        self.read(tenant_id, user_id, rest)
