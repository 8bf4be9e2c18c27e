"""The hot statements straight to sqlite3 (DESIGN §16): SQLAlchemy builds and compiles each once, then
every execution is the driver's own call.

Executing a built statement through SQLAlchemy costs ~14 µs on this machine against ~3.5 µs for the same
statement through sqlite3, and a call runs about fifteen of them. So the statements every request runs
(those marked with ``queries.hot``, and each table's INSERT) are compiled once per statement (and, for an
INSERT, per set of columns) into their SQL text, the order of their parameters with each one's type
conversion, and the columns they return with theirs; an execution then binds, runs and converts with
nothing in between. The text is SQLAlchemy's own, so both engines keep running the same statements, and
every other statement still goes through SQLAlchemy. The counts of ``counting.py`` are kept here for
what runs here.
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.dml import Insert

from tapgate.adapters.store.counting import COUNTS, WROTE
from tapgate.adapters.store.queries import is_hot

Convert = Callable[[Any], Any]


T = TypeVar("T")


def on_driver(statement: str, run: Callable[[], T]) -> T:
    """Run ``statement`` on the driver itself; its error is SQLAlchemy's, as every other one is (the
    store turns those into StorageError, and a duplicate row into Conflict)."""
    try:
        return run()
    except sqlite3.Error as e:
        raise DBAPIError.instance(statement, None, e, sqlite3.Error) from e


class Rows:
    """What the repositories read of a result: its rows (each by column name or position), the first,
    the first column of the first, and how many rows an UPDATE or DELETE matched."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return self._rows

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    arguments: tuple[tuple[str, Any, Convert | None, bool], ...]  # name, constant, conversion, a list
    row: Any  # the namedtuple of the returned columns, or None
    results: tuple[tuple[int, Convert], ...]  # the returned columns that are converted, by position
    writes: bool

    def run(self, cursor: sqlite3.Cursor, parameters: Mapping[str, Any]) -> Rows:
        values: list[Any] = []
        for name, constant, convert, many in self.arguments:
            value = parameters.get(name, constant)
            if many:
                values.extend(convert(v) if convert else v for v in value)
            else:
                values.append(convert(value) if convert and value is not None else value)
        COUNTS.statements += 1
        cursor.execute(self.sql, values)
        if self.row is None:
            return Rows([], cursor.rowcount)
        make, results = self.row._make, self.results
        rows = []
        for raw in cursor.fetchall():
            if results:
                raw = list(raw)
                for i, convert in results:
                    if raw[i] is not None:
                        raw[i] = convert(raw[i])
            rows.append(make(raw))
        return Rows(rows, cursor.rowcount)


def _row_type(names: list[str]) -> Any:
    """A row class whose fields are read by column name or by position, as SQLAlchemy's rows are."""
    return namedtuple("Row", names, rename=True)


class RawStatements:
    """The compiled hot statements of one dialect (SQLite's), and the way to run them on a connection."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._compiled: dict[tuple[int, tuple[str, ...]], _Compiled | None] = {}

    def run(
        self, connection: Any, info: dict[str, Any], statement: Executable, parameters: Any
    ) -> Rows | None:
        """Run ``statement`` on the sqlite3 ``connection`` if it is a hot one (None if not: SQLAlchemy
        runs it). ``info`` is the SQLAlchemy connection's, where a write is noted for the counts."""
        if not is_hot(statement) or not (parameters is None or isinstance(parameters, Mapping)):
            return None
        parameters = parameters or {}
        columns = tuple(parameters) if isinstance(statement, Insert) else ()
        key = (id(statement), columns)
        if key not in self._compiled:
            self._compiled[key] = self._compile(statement, columns)
        compiled = self._compiled[key]
        if compiled is None:
            return None
        if compiled.writes:
            info[WROTE] = True
        cursor = connection.cursor()
        try:
            return on_driver(compiled.sql, lambda: compiled.run(cursor, parameters))
        finally:
            cursor.close()

    def _compile(self, statement: Any, columns: Sequence[str]) -> _Compiled | None:
        dialect = self.dialect
        compiled = statement.compile(dialect=dialect, column_keys=list(columns) or None)
        if getattr(compiled, "insert_prefetch", None) or getattr(compiled, "update_prefetch", None):
            return None  # a default computed in Python: SQLAlchemy computes it
        sql = compiled.string
        arguments: list[tuple[str, Any, Convert | None, bool]] = []
        for name in compiled.positiontup or ():
            bind = compiled.binds[name]
            convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.expanding:
                if bind.required or bind.value is None:
                    return None  # a list given per call: SQLAlchemy expands it
                sql = sql.replace(f"__[POSTCOMPILE_{name}]", ", ".join("?" * len(bind.value)), 1)
                arguments.append((name, list(bind.value), convert, True))
            else:
                constant = None if bind.required else bind.effective_value
                arguments.append((name, constant, convert, False))
        if "__[POSTCOMPILE" in sql:
            return None
        returned = list(getattr(statement, "exported_columns", ()))
        row: Any = None
        results: list[tuple[int, Convert]] = []
        if returned:
            names = [c.key or f"_{i}" for i, c in enumerate(returned)]
            row = _row_type(names)
            for i, column in enumerate(returned):
                convert = column.type.dialect_impl(dialect).result_processor(dialect, None)
                if convert is not None:
                    results.append((i, convert))
        head = sql.lstrip()[:6].upper()
        return _Compiled(sql, tuple(arguments), row, tuple(results), head in ("INSERT", "UPDATE", "DELETE"))
