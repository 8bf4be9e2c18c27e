"""The audit journal and the agent's event stream on SQLite and PostgreSQL, numbered by whoever holds the
tenant's chain head; every statement names its tenant.

No writer takes the tenant's head on PostgreSQL: a writing unit of work writes its entries
and events unnumbered, to ``audit_pending`` / ``events_pending``, with the rest of what it writes as it
ends. Whoever holds the head seals what is pending, in key order: a reader (which waits for the head, as
it must see everything committed, and seals before it reads) or the store's sealer (``sql.py``), woken by
every commit that left something pending, which seals in batches. Sealing in the order pending rows
became visible keeps the chain in commit order: a row another transaction has not committed yet is not
seen, and is sealed after it commits, behind anything sealed meanwhile. Nothing is numbered twice (one
holder at a time), a reader never sees a number filled in below one it has seen (a holder numbers past
the head it holds), and a crash between a commit and a seal leaves pending rows that the next holder
seals. A unit of work that holds the head (it sealed before a read) numbers what it appends itself.

SQLite has one writer at a time, so its writers always hold the head and nothing is ever pending. Its
store keeps the heads it committed (``KeptHeads``) and a writer takes its tenant's from there instead of
reading it, while no other connection has written the file since.

A unit of work's rows, numbered or pending, are written when it ends (or before it reads the journal or
the events again). On PostgreSQL they, the head's move and the transaction's wake notifications go in one
statement, one network round trip where they were one each.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import delete, func, select, update

from tapgate.adapters.store import queries as q
from tapgate.adapters.store import tables as t
from tapgate.adapters.store.postgres_raw import PostgresConnection
from tapgate.adapters.store.sql_base import Conn, Repo, insert_into
from tapgate.adapters.store.tenancy import scoped, tenant_is
from tapgate.domain.audit import AuditEntry, AuditRecord, chain_entry, check_record
from tapgate.domain.events import Event, EventValue

_TAKE_AUDIT = scoped(delete(t.audit_pending)).returning(*t.audit_pending.c)
_TAKE_EVENTS = scoped(delete(t.events_pending)).returning(*t.events_pending.c)


# Everything a PostgreSQL unit of work writes of the chain as it ends, in one round trip: the entries and
# events it numbered or left pending (arrays, so that one prepared statement serves any number; pending
# rows keep their order in their keys), the head's move, and the wake notifications. Each part is in the
# statement only when it has something to write: PostgreSQL sets up every part of a statement's plan at
# each run, rows or none, and the parts a call leaves empty cost about a tenth of the transaction's CPU.
# ``{t}`` is the tenant's place and ``{0}``, ``{1}``… the part's own, numbered when the statement is made.
_END_PARTS: dict[str, str] = {
    "audit": """INSERT INTO audit_entries
    (tenant_id, seq, at, action, actor, outcome, subject, reason, data, prev_hash, hash)
  SELECT {t}::text, * FROM unnest({0}::bigint[], {1}::timestamptz[], {2}::text[], {3}::text[], {4}::text[],
                                 {5}::text[], {6}::text[], {7}::text[], {8}::text[], {9}::text[])""",
    "events": """INSERT INTO events (tenant_id, seq, user_id, type, data, created_at)
  SELECT {t}::text, *
  FROM unnest({0}::bigint[], {1}::text[], {2}::text[], {3}::text[], {4}::timestamptz[])""",
    "audit_left": """INSERT INTO audit_pending (tenant_id, at, action, actor, outcome, subject, reason, data)
  SELECT {t}::text, at, action, actor, outcome, subject, reason, data
  FROM unnest({0}::timestamptz[], {1}::text[], {2}::text[], {3}::text[], {4}::text[], {5}::text[],
              {6}::text[]) WITH ORDINALITY AS u(at, action, actor, outcome, subject, reason, data, n)
  ORDER BY n""",
    "events_left": """INSERT INTO events_pending (tenant_id, user_id, type, data, created_at)
  SELECT {t}::text, user_id, type, data, created_at
  FROM unnest({0}::text[], {1}::text[], {2}::text[], {3}::timestamptz[])
       WITH ORDINALITY AS u(user_id, type, data, created_at, n)
  ORDER BY n""",
    "head": "UPDATE audit_heads SET seq = {0}, hash = {1}, event_seq = {2} WHERE " + tenant_is("{t}"),  # noqa: S608
}
_NOTIFY = "SELECT count(pg_notify({0}, {1} || k)) FROM unnest({2}::text[]) AS k"
_PLACE = re.compile(r"\{(t|\d+)\}")


@functools.cache
def _end_statement(parts: tuple[str, ...], notify: bool, held: str | None = None) -> str:
    """The end statement with ``parts`` (names in ``_END_PARTS``), the wake notifications if ``notify``,
    and a row held back (``PostgresConnection.hold``: its INSERT, ``$n`` places) if ``held``. Its places:
    the tenant's ($1) if there are parts, then each part's own in order, then the notifications'
    (channel, origin, keys), then the held row's."""
    tenant = 1 if parts else 0
    taken = tenant

    def numbered(sql: str) -> str:
        nonlocal taken
        first = taken + 1
        taken += len(set(re.findall(r"\{(\d+)\}", sql)))
        return _PLACE.sub(lambda m: f"${tenant if m.group(1) == 't' else first + int(m.group(1))}", sql)

    ctes = [f"{name} AS (\n  {numbered(_END_PARTS[name])}\n)" for name in parts]
    final = numbered(_NOTIFY) if notify else "SELECT 0"
    if held is not None:
        insert = re.sub(r"\$(\d+)", lambda m: f"${int(m.group(1)) + taken}", held)
        ctes.insert(0, f"held AS (\n  {insert}\n)")
    return (f"WITH {', '.join(ctes)}\n" if ctes else "") + final


class Notify(NamedTuple):
    """The wake notifications a PostgreSQL transaction sends as it commits (``wake/postgres.py``)."""

    channel: str
    origin: str
    keys: list[str]


Head = tuple[int, str, int]  # seq, hash, event_seq


class KeptHeads:
    """The chain heads one SQLite connection committed, by tenant, kept while ``PRAGMA data_version`` says
    no other connection has committed to the file since (another process on it: a ``tapgate`` command).
    The version is read in the unit of work that takes a head, which holds SQLite's write lock from its
    ``BEGIN IMMEDIATE`` to its commit, so no other commit can fall between that read and the head it
    keeps; the connection's own commits leave the version as it was. A head left after a rollback is
    forgotten. Two statements a call fewer on SQLite: each unit of work that journals read its head."""

    __slots__ = ("_data_version", "_heads", "_version")

    def __init__(self, data_version: Callable[[], int]) -> None:
        self._data_version = data_version  # the connection's PRAGMA data_version, read now
        self._heads: dict[str, Head] = {}
        self._version: int | None = None

    def take(self, tenant_id: str) -> Head | None:
        """The tenant's head as this connection committed it, or None: read it. Call inside a unit of work."""
        version = self._data_version()
        if version != self._version:
            self._heads.clear()
            self._version = version
        return self._heads.get(tenant_id)

    def keep(self, tenant_id: str, head: Head) -> None:
        """``head``, committed by the unit of work that took its tenant's last (call after the commit)."""
        self._heads[tenant_id] = head

    def forget(self, tenant_id: str | None = None) -> None:
        """A tenant's head (a unit of work that took it did not commit), or every head (a new connection)."""
        if tenant_id is None:
            self._heads.clear()
            self._version = None
        else:
            self._heads.pop(tenant_id, None)


class ChainHead:
    """One unit of work's hold on its tenant's chain head, shared by its journal and its events."""

    def __init__(self, conn: Conn, tenant_id: str, concurrent: bool, kept: KeptHeads | None = None) -> None:
        self.conn = conn
        self.tenant_id = tenant_id
        self.concurrent = concurrent  # other transactions may write at once (PostgreSQL)
        self.kept = kept  # SQLite: the heads its connection committed
        self._held: list[Any] | None = None  # [seq, hash, event_seq] while this unit of work holds it
        self._tried = False
        self._moved = False
        self.left_pending = False  # wrote something another holder must seal
        self._entries: list[AuditEntry] = []  # numbered, not yet written
        self._events: list[tuple[int, str, str, str, datetime]] = []  # (seq, user, type, data, at)
        self._left_entries: list[tuple[AuditRecord, datetime]] = []  # pending, not yet written
        self._left_events: list[tuple[str, str, str, datetime]] = []  # (user, type, data, at)

    async def take(self) -> bool:
        """Whether this unit of work numbers what it appends: on SQLite it takes the head (one writer at
        a time, so it is free); on PostgreSQL only if it holds the head already, having sealed before a
        read. False: what it appends is left pending."""
        if not self.concurrent and not self._tried:
            self._tried = True
            kept = self.kept.take(self.tenant_id) if self.kept is not None else None
            if kept is not None:
                self._held = list(kept)
                return True
            row = (await self.conn.execute(q.CHAIN_HEAD, {"tenant": self.tenant_id})).first()
            if row is not None:
                await self._hold(row)
        return self._held is not None

    def after_end(self, committed: bool) -> None:
        """SQLite: keep the head this unit of work committed, or forget its tenant's if it took the head
        and did not commit."""
        if self.kept is None or self._held is None:
            return
        if committed:
            seq, hash, event_seq = self._held
            self.kept.keep(self.tenant_id, (int(seq), str(hash), int(event_seq)))
        else:
            self.kept.forget(self.tenant_id)

    def leave(self, record: AuditRecord, at: datetime) -> None:
        """An entry for a holder to number and chain (``take`` was False)."""
        self._left_entries.append((record, at))

    def leave_event(self, user_id: str, type: str, data: str, at: datetime) -> None:
        """An event for a holder to number (``take`` was False)."""
        self._left_events.append((user_id, type, data, at))

    async def sealed(self) -> None:
        """Before a read: seal what is pending, this unit of work's own included, waiting for the head if
        it must (PostgreSQL), and write what this unit of work numbered."""
        if self.concurrent and self._held is None:
            tenant = {"tenant": self.tenant_id}
            mine = bool(self._left_entries or self._left_events)
            if mine:
                await self._write()
            row = None if mine else (await self.conn.execute(q.CHAIN_HEAD, tenant)).first()
            if mine or (row is not None and row.pending):
                self._tried = True
                held = (await self.conn.execute(q.CHAIN_HEAD_WAIT, tenant)).first()
                if held is not None:
                    await self._hold(held)
        await self._write()

    def head(self) -> tuple[int, str] | None:
        return None if self._held is None else (int(self._held[0]), str(self._held[1]))

    async def _hold(self, row: Any) -> None:
        self._held = [row.seq, row.hash, row.event_seq]
        if row.pending:
            await self._seal_pending()
            self.left_pending = False  # its own rows, if it left any, are sealed with the rest

    async def _seal_pending(self) -> None:
        tenant = {"tenant": self.tenant_id}
        entries = sorted((await self.conn.execute(_TAKE_AUDIT, tenant)).all(), key=lambda r: r.key)
        for r in entries:
            record = AuditRecord(r.action, r.actor, r.outcome, r.subject, r.reason, json.loads(r.data))
            await self.chain(record, r.at)
        events = sorted((await self.conn.execute(_TAKE_EVENTS, tenant)).all(), key=lambda r: r.key)
        for r in events:
            await self.number(r.user_id, r.type, r.data, r.created_at)

    async def chain(self, record: AuditRecord, at: datetime) -> AuditEntry:
        assert self._held is not None
        entry = chain_entry(self.tenant_id, self._held[0] + 1, at, record, self._held[1])
        self._entries.append(entry)
        self._held[0], self._held[1] = entry.seq, entry.hash
        self._moved = True
        return entry

    async def number(self, user_id: str, type: str, data: str, at: datetime) -> None:
        assert self._held is not None
        self._held[2] += 1
        self._events.append((self._held[2], user_id, type, data, at))
        self._moved = True

    async def before_commit(self, notify: Notify | None = None) -> None:
        """Write what this unit of work numbered or left pending, and the head once, where it left it; on
        PostgreSQL with ``notify``'s wake notifications, all in one statement."""
        if isinstance(self.conn, PostgresConnection):
            await self._end_on_postgres(self.conn, notify)
            return
        assert notify is None, "only PostgreSQL sends wake notifications"
        await self._write()
        await self._move_head()

    async def _write(self) -> None:
        """Write the rows numbered or left so far: on PostgreSQL in one statement, which moves the head
        too if it moved (again at the end if it moves again); on SQLite one statement a row."""
        if isinstance(self.conn, PostgresConnection):
            await self._end_on_postgres(self.conn, None)
            return
        await self._write_left()
        await self._write_numbered()

    async def _write_left(self) -> None:
        """Write the rows left pending, one statement each."""
        entries, self._left_entries = self._left_entries, []
        for record, at in entries:
            await self.conn.execute(insert_into(t.audit_pending), _pending_row(self.tenant_id, record, at))
        events, self._left_events = self._left_events, []
        for user_id, type, data, at in events:
            await self.conn.execute(
                insert_into(t.events_pending),
                {
                    "tenant_id": self.tenant_id,
                    "user_id": user_id,
                    "type": type,
                    "data": data,
                    "created_at": at,
                },
            )
        self.left_pending |= bool(entries or events)

    async def _write_numbered(self) -> None:
        entries, self._entries = self._entries, []
        for entry in entries:
            await self.conn.execute(insert_into(t.audit_entries), _entry_row(entry))
        events, self._events = self._events, []
        for seq, user_id, type, data, at in events:
            await self.conn.execute(
                insert_into(t.events),
                {
                    "tenant_id": self.tenant_id,
                    "seq": seq,
                    "user_id": user_id,
                    "type": type,
                    "data": data,
                    "created_at": at,
                },
            )

    async def _move_head(self) -> None:
        if self._moved and self._held is not None:
            seq, hash, event_seq = self._held
            await self.conn.execute(
                q.MOVE_CHAIN_HEAD,
                {"tenant": self.tenant_id, "seq": seq, "hash": hash, "event_seq": event_seq},
            )
            self._moved = False

    async def _end_on_postgres(self, conn: PostgresConnection, notify: Notify | None) -> None:
        moved = self._moved and self._held is not None
        entries, self._entries = self._entries, []
        events, self._events = self._events, []
        left, self._left_entries = self._left_entries, []
        left_events, self._left_events = self._left_events, []
        held = conn.take_held()  # a row the unit of work held back: it goes in the same statement
        writes = bool(entries or events or left or left_events or moved or held)
        if not (writes or (notify and notify.keys)):
            return
        parts: list[str] = []
        values: list[Any] = []
        if entries:
            parts.append("audit")
            values += (
                [e.seq for e in entries],
                [e.at for e in entries],
                [e.action for e in entries],
                [e.actor for e in entries],
                [e.outcome for e in entries],
                [e.subject for e in entries],
                [e.reason for e in entries],
                [json.dumps(dict(e.data), sort_keys=True) for e in entries],
                [e.prev_hash for e in entries],
                [e.hash for e in entries],
            )
        if events:
            parts.append("events")
            values += ([e[i] for e in events] for i in range(5))
        if left:
            parts.append("audit_left")
            values += (
                [at for _, at in left],
                [r.action for r, _ in left],
                [r.actor for r, _ in left],
                [r.outcome for r, _ in left],
                [r.subject for r, _ in left],
                [r.reason for r, _ in left],
                [json.dumps(dict(r.data), sort_keys=True) for r, _ in left],
            )
        if left_events:
            parts.append("events_left")
            values += ([e[i] for e in left_events] for i in range(4))
        if moved:
            assert self._held is not None
            parts.append("head")
            values += self._held
        if notify and notify.keys:
            values += (notify.channel, notify.origin, notify.keys)
        if held is not None:
            values += held.values
        sql = _end_statement(tuple(parts), bool(notify and notify.keys), None if held is None else held.sql)
        await conn.fetchval(sql, *([self.tenant_id] if parts else []), *values, writes=writes, held=held)
        self._moved = False
        self.left_pending |= bool(left or left_events)


def _pending_row(tenant_id: str, record: AuditRecord, at: datetime) -> dict[str, Any]:
    return {
        "tenant_id": tenant_id,
        "at": at,
        "action": record.action,
        "actor": record.actor,
        "outcome": record.outcome,
        "subject": record.subject,
        "reason": record.reason,
        "data": json.dumps(dict(record.data), sort_keys=True),
    }


def _entry_row(entry: AuditEntry) -> dict[str, Any]:
    return {
        "tenant_id": entry.tenant_id,
        "seq": entry.seq,
        "at": entry.at,
        "action": entry.action,
        "actor": entry.actor,
        "outcome": entry.outcome,
        "subject": entry.subject,
        "reason": entry.reason,
        "data": json.dumps(dict(entry.data), sort_keys=True),
        "prev_hash": entry.prev_hash,
        "hash": entry.hash,
    }


class ChainRepo(Repo):
    def __init__(self, conn: Conn, tenant_id: str, chain: ChainHead) -> None:
        super().__init__(conn, tenant_id)
        self.chain = chain


# What an erased event's text holds: ``append`` and ``erase_bodies`` write JSON with sorted keys and the
# default separators, and inside a string value a quote is always escaped, so no body can hold it.
_ERASED = '%"erased": true%'


def first_made_from(tenant_id: str, after: int, before: datetime) -> Any:
    """The number of the first event after ``after`` made from ``before`` on: events are numbered in
    commit order, so every event before it is older, and the search stops where it is found."""
    c = t.events.c
    later = scoped(select(c.seq), tenant_id).where(c.seq > after, c.created_at >= before)
    return later.order_by(c.seq).limit(1)


def events_to_erase(tenant_id: str, type: str, before: datetime, after: int, through: int | None) -> Any:
    """The events of ``type`` numbered after ``after`` (and up to ``through``), made before ``before``,
    whose fields are not erased yet: a search along the events' key."""
    c = t.events.c
    query = scoped(select(c.seq, c.data), tenant_id).where(
        c.seq > after, c.type == type, c.created_at < before, c.data.not_like(_ERASED)
    )
    return query if through is None else query.where(c.seq <= through)


class SqlEvents(ChainRepo):
    async def erase_bodies(
        self, type: str, fields: Sequence[str], before: datetime, after: int | None = None
    ) -> tuple[int, int]:
        await self.chain.sealed()
        c = t.events.c
        start = after or 0
        # Up to the first event made from ``before`` on every event is old: a round that starts where the
        # last one ended reads only what became old since, not the tenant's whole history.
        young = await self.conn.scalar(first_made_from(self.tenant_id, start, before))
        if young is not None:
            through = young - 1
        else:
            last = await self.conn.scalar(self.scoped(select(func.max(c.seq))))
            through = max(start, last or 0)
        if after is not None and through == after:
            return 0, after
        bound = None if after is None else through  # without ``after``: every old one, in any order
        found = await self.conn.execute(events_to_erase(self.tenant_id, type, before, start, bound))
        rows = found.all()
        for row in rows:
            data = json.loads(row.data)
            data.update(dict.fromkeys(fields, ""), erased=True)
            await self.conn.execute(
                self.scoped(update(t.events))
                .where(c.seq == row.seq)
                .values(data=json.dumps(data, sort_keys=True))
            )
        return len(rows), int(through)

    async def append(self, user_id: str, type: str, data: Mapping[str, EventValue], at: datetime) -> None:
        text = json.dumps(dict(data), sort_keys=True)
        if await self.chain.take():
            await self.chain.number(user_id, type, text, at)
            return
        self.chain.leave_event(user_id, type, text, at)

    async def read(self, user_id: str, after: int, limit: int) -> Sequence[Event]:
        await self.chain.sealed()
        rows = await self.conn.execute(
            q.EVENTS_AFTER, {"tenant": self.tenant_id, "user": user_id, "after": after, "limit": limit}
        )
        return [Event(r.tenant_id, r.seq, r.user_id, r.type, json.loads(r.data), r.created_at) for r in rows]


class SqlJournal(ChainRepo):
    async def head(self) -> tuple[int, str] | None:
        await self.chain.sealed()
        held = self.chain.head()
        if held is not None:
            return held
        row = (await self.conn.execute(q.CHAIN_HEAD, {"tenant": self.tenant_id})).first()
        return None if row is None else (int(row.seq), str(row.hash))

    async def append(self, record: AuditRecord, at: datetime) -> None:
        check_record(record)
        if await self.chain.take():
            await self.chain.chain(record, at)
            return
        self.chain.leave(record, at)

    async def read(self, after: int, limit: int) -> Sequence[AuditEntry]:
        await self.chain.sealed()
        c = t.audit_entries.c
        rows = await self.conn.execute(
            self.scoped(select(t.audit_entries)).where(c.seq > after).order_by(c.seq).limit(limit)
        )
        return _entries(rows)

    async def find(self, action: str, subject: str) -> Sequence[AuditEntry]:
        await self.chain.sealed()
        c = t.audit_entries.c
        rows = await self.conn.execute(
            self.scoped(select(t.audit_entries))
            .where(c.action == action, c.subject == subject)
            .order_by(c.seq)
        )
        return _entries(rows)


def _entries(rows: Any) -> list[AuditEntry]:
    return [
        AuditEntry(
            tenant_id=r.tenant_id,
            seq=r.seq,
            at=r.at,
            action=r.action,
            actor=r.actor,
            outcome=r.outcome,
            subject=r.subject,
            reason=r.reason,
            data=json.loads(r.data),
            prev_hash=r.prev_hash,
            hash=r.hash,
        )
        for r in rows
    ]
