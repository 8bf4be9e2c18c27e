"""The hot statements (``raw.py``) straight on sqlite3, on the event loop's thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, StatementError
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
        raise driver_error(statement, e) from e


def driver_error(statement: str, error: sqlite3.Error) -> StatementError:
    """The driver's ``error`` as SQLAlchemy's (see ``on_driver``)."""
    return DBAPIError.instance(statement, None, error, sqlite3.Error)


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
        try:  # on_driver's translation, without a closure a statement
            cursor = connection.execute(compiled.sql, values)
            fetched = cursor.fetchall()
        except sqlite3.Error as e:
            raise driver_error(compiled.sql, e) from e
        return compiled.rows(fetched, cursor.rowcount)
