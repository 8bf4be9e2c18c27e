"""The hot statements, compiled once by SQLAlchemy and run on the database's own driver.

Executing a built statement through SQLAlchemy costs several times what the same statement costs through
the driver, and a call runs about fifteen of them (what that buys: ``tapgate.api.fast``'s docstring). So
the statements every request runs (those marked with ``queries.hot``, and each table's INSERT) are
compiled once per statement (and, for an INSERT, per set of columns) into their SQL text, the order of
their parameters with each one's type conversion, and the columns they return with theirs; an execution
then binds, runs and converts with nothing in between. The text is SQLAlchemy's own, so both engines keep
running the same statements, and every other statement still goes through SQLAlchemy. Each engine runs
them its way: ``sqlite_raw.py`` on sqlite3, ``postgres_raw.py`` on asyncpg.
"""

from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.dml import Insert

from tapgate.adapters.store.queries import is_hot

Convert = Callable[[Any], Any]


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
class Compiled:
    sql: str
    arguments: tuple[tuple[str, Any, Convert | None, bool], ...]  # name, constant, conversion, a list
    row: Any  # the namedtuple of the returned columns, or None
    results: tuple[tuple[int, Convert], ...]  # the returned columns that are converted, by position
    writes: bool

    def values(self, parameters: Mapping[str, Any]) -> list[Any]:
        """The driver's parameters, in order, each converted as SQLAlchemy would."""
        values: list[Any] = []
        for name, constant, convert, many in self.arguments:
            value = parameters.get(name, constant)
            if many:
                values.extend(convert(v) if convert else v for v in value)
            else:
                values.append(convert(value) if convert and value is not None else value)
        return values

    def rows(self, fetched: Sequence[Any], rowcount: int) -> Rows:
        """The driver's rows, each converted as SQLAlchemy would."""
        if self.row is None:
            return Rows([], rowcount)
        make, results = self.row._make, self.results
        rows = []
        for raw in fetched:
            if results:
                raw = list(raw)
                for i, convert in results:
                    if raw[i] is not None:
                        raw[i] = convert(raw[i])
            rows.append(make(raw))
        return Rows(rows, rowcount)


def _places(sql: str) -> list[int]:
    """The numbered places of ``sql`` ($1, $2, …), in order, each once."""
    return sorted({int(n) for n in re.findall(r"\$(\d+)", sql)})


def _row_type(names: list[str]) -> Any:
    """A row class whose fields are read by column name or by position, as SQLAlchemy's rows are."""
    return namedtuple("Row", names, rename=True)


class RawStatements:
    """The compiled hot statements of one dialect."""

    def __init__(self, dialect: Dialect, on_driver: bool = True) -> None:
        """``on_driver`` off: SQLAlchemy runs every statement, the hot ones too."""
        self.dialect = dialect
        self.on_driver = on_driver
        self._compiled: dict[tuple[int, tuple[str, ...]], Compiled | None] = {}

    def find(self, statement: Executable, parameters: Any) -> Compiled | None:
        """``statement`` compiled for the driver if it is a hot one (None if not: SQLAlchemy runs it)."""
        if not self.on_driver or not is_hot(statement):
            return None
        if not (parameters is None or isinstance(parameters, Mapping)):
            return None
        columns = tuple(parameters) if parameters and isinstance(statement, Insert) else ()
        key = (id(statement), columns)
        if key not in self._compiled:
            self._compiled[key] = self._compile(statement, columns)
        return self._compiled[key]

    def _compile(self, statement: Any, columns: Sequence[str]) -> Compiled | None:
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
                if dialect.paramstyle == "qmark":
                    sql = sql.replace(f"__[POSTCOMPILE_{name}]", ", ".join("?" * len(bind.value)), 1)
                    arguments.append((name, list(bind.value), convert, True))
                else:  # numbered places ($1): the statement's own constants are written into its text
                    literal = bind.type.dialect_impl(dialect).literal_processor(dialect)
                    if literal is None:
                        return None
                    listed = ", ".join(literal(v) for v in bind.value)
                    sql = sql.replace(f"__[POSTCOMPILE_{name}]", listed, 1)
            else:
                constant = None if bind.required else bind.effective_value
                arguments.append((name, constant, convert, False))
        if "__[POSTCOMPILE" in sql:
            return None
        if dialect.paramstyle == "numeric_dollar" and _places(sql) != list(range(1, len(arguments) + 1)):
            return None  # a constant written in moved the numbering: SQLAlchemy runs it
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
        return Compiled(sql, tuple(arguments), row, tuple(results), head in ("INSERT", "UPDATE", "DELETE"))
