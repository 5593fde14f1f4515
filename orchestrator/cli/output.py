"""Printing rows for people (rich tables) and for scripts (JSON, CSV)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
import time
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Iterable, Iterator, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.escape import one_line, printable


def _console(stderr: bool = False) -> Console:
    # Piped output (logs, CI) would otherwise be folded to 80 columns; keep rows on one line,
    # unless COLUMNS says how wide the reader's screen is (`COLUMNS=120 orch plan ... | less`).
    # emoji=False: a user's text (a file name, a value in an error) is printed as written, never
    # with `:100:` turned into an emoji (issue 53).
    probe = Console(stderr=stderr, emoji=False)
    if probe.is_terminal:
        return probe
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and 20 <= int(columns) <= 10_000 else max(probe.width, 200)
    return Console(stderr=stderr, width=width, emoji=False)


console = _console()
err_console = _console(stderr=True)


def jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


# One row (a dict in a list of dicts) per line: json's C encoder writes it; with ``indent`` json
# falls back to its pure-Python encoder, ~50 us a row, which a 20,000-run plan listing feels.
_ROW = json.JSONEncoder(default=jsonable, separators=(", ", ": "))


def _rows_text(rows: list[Any], indent: str) -> str:
    return "[\n" + ",\n".join(indent + "  " + _ROW.encode(row) for row in rows) + "\n" + indent + "]"


def _is_rows(value: Any) -> bool:
    return type(value) is list and bool(value) and all(type(item) is dict for item in value)


def json_text(data: Any) -> str:
    """``json.dumps(data, indent=2)``, but for lists of rows (dicts), each row on one line."""
    if _is_rows(data):
        return _rows_text(data, "")
    if type(data) is not dict or not data or not all(type(key) is str for key in data):
        return json.dumps(data, default=jsonable, indent=2)
    members = []
    for key, value in data.items():
        text = (_rows_text(value, "  ") if _is_rows(value)
                else json.dumps(value, default=jsonable, indent=2).replace("\n", "\n  "))
        members.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(members) + "\n}"


def print_json(data: Any) -> None:
    sys.stdout.write(json_text(data) + "\n")


def sig3(value: float | None) -> float | None:
    """A prediction as the plan shows and stores it in JSON: 3 significant digits."""
    return None if value is None else float(f"{value:.3g}")


def fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(jsonable(value))


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    table = Table(title=title, header_style="bold")
    rows = [list(row) for row in rows]
    for index, column in enumerate(columns):
        values = [row[index] for row in rows if index < len(row)]
        if values and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
            # A number is never folded across lines (issue 53): its column is as wide as its
            # widest value, and the text columns fold instead.
            table.add_column(column, overflow="fold", justify="right",
                             min_width=max(len(fmt(v)) for v in values), no_wrap=True)
        else:
            table.add_column(column, overflow="fold")
    for row in rows:
        # Text, not markup: a value's "[...]" is printed as written, and its control characters
        # (a terminal escape sequence in a value) escaped, never acted on.
        table.add_row(*(Text(one_line(fmt(v))) for v in row))
    console.print(table)


def print_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt_name: str, title: str | None = None) -> None:
    if fmt_name == "json":
        print_json([{c: jsonable(v) for c, v in zip(columns, row)} for row in rows])
    elif fmt_name == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(columns)
        # Text with its control characters escaped (an escape sequence in a value would act on the
        # terminal the CSV is shown in); newlines and tabs stay, inside CSV's quotes.
        writer.writerows([[printable(v) if isinstance(v, str) else jsonable(v) for v in row] for row in rows])
        sys.stdout.write(buffer.getvalue())
    else:
        print_table(columns, rows, title)


def _workers() -> int:
    from orchestrator.predict import memory

    try:
        return memory.trace_workers()
    except ValueError:  # the plan says so itself
        return 1


@contextlib.contextmanager
def trace_progress() -> Iterator[None]:
    """Say on stderr which model shape's memory is being traced while a plan waits on it.

    A shape is traced once (under a second each on this machine's CPU, then cached), so a first
    plan of a campaign with many new shapes would otherwise sit silent for minutes. A terminal
    gets a spinner with the shape; a log gets one line before the first trace and one after.
    """
    from orchestrator.predict import memory

    count = 0
    started = time.monotonic()
    status = err_console.status("", spinner="dots") if err_console.is_terminal else None

    def told(inputs: Any) -> None:
        nonlocal count
        count += 1
        if status is not None:
            if count == 1:
                status.start()
            status.update(f"tracing the peak memory of a new shape ({count}): {memory.describe(inputs)}")
        elif count == 1:
            err_console.print(f"orch: tracing the peak memory of shapes not traced before (under a second each, "
                              f"up to {_workers()} at a time; cached in {memory.cache_dir()})",
                              markup=False, highlight=False, soft_wrap=True)

    try:
        with memory.on_trace(told):
            yield
    finally:
        if status is not None and count:
            status.stop()
    if count:
        err_console.print(f"orch: traced {count} new shape(s) in {time.monotonic() - started:.0f} s",
                          markup=False, highlight=False, soft_wrap=True)
