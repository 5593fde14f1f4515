"""Bulk INSERTs through each driver's own fast path, for the ingest of many metrics files.

SQLAlchemy Core's ``executemany`` builds and processes one parameter dict per row (about
4 us each, most of the ingest time at 100,000 rows). Here rows are plain tuples:
SQLite takes them through ``sqlite3``'s ``executemany``; PostgreSQL through ``COPY ... FROM
STDIN`` (psycopg 3's ``cursor.copy``, or psycopg2's ``copy_expert`` when that driver is in
use), which is several times faster than multi-row INSERTs. Both drivers get the same
COPY text, built here. Everything runs on the caller's connection, inside its transaction.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import BigInteger, Connection, Float, Integer, SmallInteger, String, Table, Text, insert
from sqlalchemy.sql.elements import KeyedColumnElement

# Python int, float and str reach the drivers as they are; any other column type (DateTime
# on SQLite, stored as text) goes through SQLAlchemy's bind processor, so bulk-written rows
# read back exactly like ORM-written ones.
_NATIVE = (Integer, Float, String, Text)


# The integers each column type holds on PostgreSQL (SQLite holds any 64-bit integer in any of
# them): a value must fit the strictest backend, so that what SQLite stores PostgreSQL does too.
_INTEGER_BITS: tuple[tuple[type, int], ...] = ((BigInteger, 64), (SmallInteger, 16), (Integer, 32))


def column_problem(column: KeyedColumnElement[Any], value: Any) -> str | None:
    """Why ``value`` cannot be stored in ``column`` on every backend, or None.

    SQLite takes anything: a string longer than its ``String(n)``, a NUL character, an integer
    beyond the column's type. PostgreSQL refuses each (``varchar(n)`` counts characters, ``text``
    cannot hold NUL, ``integer`` is 32-bit), and a refusal inside a bulk write fails the whole
    batch. Checked here, from the column's own type, the two backends accept the same values."""
    if value is None:
        return None
    column_type = column.type
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character (\\0), which a database text column cannot hold"
        length = getattr(column_type, "length", None)
        if length is not None and len(value) > length:
            return f"{len(value)} characters, over the {length} its database column ({column.key}) holds"
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and isinstance(column_type, Integer):
        bits = next(b for kind, b in _INTEGER_BITS if isinstance(column_type, kind))
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            return f"{value} is beyond the {bits}-bit integers its database column ({column.key}) holds"
        return None
    if isinstance(value, (int, float)) and isinstance(column_type, Float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    return None


def insert_rows(connection: Connection, table: Table, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> int:
    """INSERT ``rows`` (tuples in the order of ``columns``) into ``table``; returns the row count."""
    if not rows:
        return 0
    dialect = connection.dialect
    processors = _processors(connection, table, columns)
    if processors:
        rows = [_processed(row, processors) for row in rows]
    if dialect.name == "postgresql" and dialect.driver in ("psycopg", "psycopg2"):
        _copy(connection, table, columns, rows)
    elif dialect.paramstyle in ("qmark", "format", "pyformat"):
        marker = "?" if dialect.paramstyle == "qmark" else "%s"
        quote = dialect.identifier_preparer.quote
        sql = (f"INSERT INTO {quote(table.name)} ({', '.join(quote(c) for c in columns)}) "
               f"VALUES ({', '.join([marker] * len(columns))})")
        connection.exec_driver_sql(sql, rows)
    else:  # another driver: SQLAlchemy's portable path
        connection.execute(insert(table), [dict(zip(columns, row)) for row in rows])
    return len(rows)


def _processors(connection: Connection, table: Table, columns: Sequence[str]) -> list[tuple[int, Callable[[Any], Any]]]:
    found: list[tuple[int, Callable[[Any], Any]]] = []
    for index, name in enumerate(columns):
        column_type = table.c[name].type
        if isinstance(column_type, _NATIVE):
            continue
        processor = column_type._cached_bind_processor(connection.dialect)
        if processor is not None:
            found.append((index, processor))
    return found


def _processed(row: tuple[Any, ...], processors: list[tuple[int, Callable[[Any], Any]]]) -> tuple[Any, ...]:
    values = list(row)
    for index, processor in processors:
        values[index] = processor(values[index])
    return tuple(values)


# COPY's text format: tab-separated, \N for NULL, backslash escapes for the rest. Chained
# str.replace: str.translate with a mapping costs ~100 us on a 3 KB metrics document.
def _copy_text(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


_COPY_FORMATS: dict[type, Callable[[Any], str]] = {
    str: _copy_text,
    float: float.__repr__,  # shortest text that reads back as the same double
    int: int.__repr__,
    bool: lambda value: "t" if value else "f",
    type(None): lambda _: "\\N",
}


def _copy_field(value: Any) -> str:
    format_value = _COPY_FORMATS.get(type(value))
    return format_value(value) if format_value else _copy_text(str(value))


def _copy(connection: Connection, table: Table, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
    quote = connection.dialect.identifier_preparer.quote
    statement = f"COPY {quote(table.name)} ({', '.join(quote(c) for c in columns)}) FROM STDIN"
    data = "".join(["\t".join(map(_copy_field, row)) + "\n" for row in rows])
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        if connection.dialect.driver == "psycopg":
            with cursor.copy(statement) as copy:
                copy.write(data)
        else:
            cursor.copy_expert(statement, io.StringIO(data))
    finally:
        cursor.close()
