"""Bounds on what one `orch sql` query may take: rows, bytes and time (issue 53).

Rows alone did not bound memory (a row may hold a 16 MB document) nor time (a cross join of the
metric values runs for hours); each bound ends the query with a message that names it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Result
from sqlalchemy.orm import Session

from orchestrator.errors import UserError

# The most rows one query may be asked to print: past a C int the driver's fetchmany overflows,
# and far past what a terminal or a file of results holds.
MAX_ROWS_LIMIT = 2**31 - 2
# The bytes of values one query may read (about: text and bytes by length, other values by
# their printed form): past it the rest is left out, as with --max-rows.
SQL_MAX_BYTES = 512 * 1024 * 1024
# Seconds one query may run unless --timeout says otherwise.
SQL_TIMEOUT_S = 300.0
# SQLite virtual machine instructions between two looks at the clock.
_SQLITE_CHECK_EVERY = 100_000


def check_max_rows(max_rows: int) -> None:
    if max_rows < 0 or max_rows > MAX_ROWS_LIMIT:
        raise UserError(f"--max-rows: expected 0 (no limit) or a count up to {MAX_ROWS_LIMIT:,}, got {max_rows}")


def check_timeout(timeout_s: float) -> None:
    if not (0 <= timeout_s <= 7 * 24 * 3600):
        raise UserError(f"--timeout: expected 0 (no limit) or seconds up to a week, got {timeout_s}")


def _size(value: Any) -> int:
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return len(value)
    return 8 if isinstance(value, (int, float)) or value is None else len(str(value))


def fetch_bounded(result: Result[Any], max_rows: int, max_bytes: int = SQL_MAX_BYTES) -> tuple[list[list[Any]], str]:
    """The rows of ``result`` up to ``max_rows`` (0: no limit) and ``max_bytes``; and a note
    saying which bound left rows out ("" when none did)."""
    rows: list[list[Any]] = []
    total = 0
    for row in result:
        if max_rows and len(rows) == max_rows:
            return rows, (f"only the first {max_rows} rows are shown; the query returned more "
                          "(add LIMIT/OFFSET, or --max-rows 0 for all)")
        values = list(row)
        total += sum(_size(v) for v in values)
        if total > max_bytes:
            return rows, (f"only the first {len(rows)} rows are shown: the next would take the output past "
                          f"{max_bytes // 2**20} MiB (select fewer columns, or add LIMIT/OFFSET)")
        rows.append(values)
    return rows, ""


def _timeout_error(timeout_s: float) -> UserError:
    return UserError(f"the query ran past {timeout_s:g} s and was stopped; nothing was changed by orch "
                     "(narrow it with WHERE or LIMIT, or give --timeout SECONDS, 0 for none)")


def is_timeout(exc: BaseException) -> bool:
    """Whether a driver error is a time limit this module set (PostgreSQL's statement_timeout,
    SQLite's interrupt)."""
    orig = getattr(exc, "orig", exc)
    name = type(orig).__name__
    return name == "QueryCanceled" or (isinstance(orig, sqlite3.OperationalError) and "interrupted" in str(orig))


@contextmanager
def time_limit(session: Session, timeout_s: float) -> Iterator[None]:
    """Stop the session's statements after ``timeout_s`` (0: never): PostgreSQL's own
    statement_timeout (for this transaction), a progress handler on SQLite that interrupts the
    statement once the time is up (it runs while rows are fetched too). Raises a UserError."""
    if not timeout_s:
        yield
        return
    connection = session.connection()
    dialect = connection.dialect.name
    raw: Any = None
    if dialect == "postgresql":
        session.execute(text(f"SET LOCAL statement_timeout = {int(timeout_s * 1000)}"))
    elif dialect == "sqlite":
        raw = connection.connection.driver_connection
        deadline = time.monotonic() + timeout_s
        raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, _SQLITE_CHECK_EVERY)
    try:
        yield
    except Exception as exc:
        if is_timeout(exc):
            raise _timeout_error(timeout_s) from None
        raise
    finally:
        if raw is not None:
            raw.set_progress_handler(None, 0)
