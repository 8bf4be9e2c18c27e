"""The hot statements (``raw.py``) straight on sqlite3, on the event loop's thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.base import Executable

from tapgate.adapters.store.counting import COUNTS, WROTE
from tapgate.adapters.store.raw import RawStatements, Rows

T = TypeVar("T")


def on_driver(statement: str, run: Callable[[], T]) -> T:
    """Run ``statement`` on the driver itself; its error is SQLAlchemy's, as every other one is (the
    store turns those into StorageError, and a duplicate row into Conflict)."""
    try:
        return run()
    except sqlite3.Error as e:
        raise DBAPIError.instance(statement, None, e, sqlite3.Error) from e


class SqliteStatements(RawStatements):
    def run(
        self, connection: Any, info: dict[str, Any], statement: Executable, parameters: Any
    ) -> Rows | None:
        """Run ``statement`` on the sqlite3 ``connection`` if it is a hot one (None if not: SQLAlchemy
        runs it). ``info`` is the SQLAlchemy connection's, where a write is noted for the counts."""
        compiled = self.find(statement, parameters)
        if compiled is None:
            return None
        values = compiled.values(parameters or {})
        if compiled.writes:
            info[WROTE] = True
        COUNTS.statements += 1
        cursor = connection.cursor()

        def execute() -> Rows:
            fetched = cursor.execute(compiled.sql, values).fetchall()
            return compiled.rows(fetched, cursor.rowcount)

        try:
            return on_driver(compiled.sql, execute)
        finally:
            cursor.close()
