"""Counts of what the database was asked to do in this process: transactions, the ones that wrote, and
statements. The bench reads them off ``/metrics`` around a timed window, so the transactions and
statements per round trip it reports are counted, not estimated.

The counts come from SQLAlchemy's engine events (every statement the SQL store sends goes through one),
so they cost an attribute increment per statement and see nothing a test could forget to add.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

_WRITES = ("INSERT", "UPDATE", "DELETE")
WROTE = "tapgate_wrote"  # set in a connection's info by a statement that wrote
_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


@dataclass
class DbCounts:
    transactions: int = 0  # committed or rolled back
    writing: int = 0  # of those, the ones that committed an INSERT, UPDATE or DELETE
    statements: int = 0  # sent to the database, transaction control aside

    def as_dict(self) -> dict[str, int]:
        return {"transactions": self.transactions, "writing": self.writing, "statements": self.statements}


COUNTS = DbCounts()  # one per process: what /metrics shows as tapgate_db_*


def ended(wrote: bool) -> None:
    """Count a transaction that the driver ended itself (``sqlite.py``)."""
    COUNTS.transactions += 1
    if wrote:
        COUNTS.writing += 1


def count(engine: Engine) -> None:
    """Count ``engine``'s statements and transactions into ``COUNTS`` (the sync engine of an async one)."""

    @event.listens_for(engine, "before_cursor_execute")
    def _statement(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        head = statement.lstrip()[:8].upper()
        if head.startswith(_CONTROL):
            return
        COUNTS.statements += 1
        if head.startswith(_WRITES):
            conn.info[WROTE] = True

    @event.listens_for(engine, "commit")
    def _commit(conn: Any) -> None:
        COUNTS.transactions += 1
        if conn.info.pop(WROTE, False):
            COUNTS.writing += 1

    @event.listens_for(engine, "rollback")
    def _rollback(conn: Any) -> None:
        COUNTS.transactions += 1
        if not conn.invalidated:  # a connection that died has no info to read (and reading it raises)
            conn.info.pop(WROTE, None)
