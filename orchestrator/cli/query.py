"""`orch sql`, `orch export` and `orch report`: reading the results database.

The queries are orchestrator/results/queries.py and the report orchestrator/results/report/;
this module checks the options and prints.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from orchestrator.cli.common import SweepOpt, orch_context, require_database
from orchestrator.cli.output import console, err_console, print_rows
from orchestrator.errors import UserError, did_you_mean
from orchestrator.results import EXPORTABLE

# A query file is a page of SQL; anything far larger is not one.
SQL_FILE_LIMIT = 16 * 1024 * 1024
# Rows `orch sql` reads unless told otherwise: far more than a person reads, few enough to hold.
SQL_MAX_ROWS = 100_000


def sql(
    ctx: typer.Context,
    query: Annotated[Optional[str], typer.Argument(
        help="The query, in SQL: of the results view, or any view `orch glossary` describes.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    file: Annotated[Optional[Path], typer.Option("--file", help="Read the query from this file "
                                                 "(e.g. db/queries/scaling_efficiency.sql).")] = None,
    write: Annotated[bool, typer.Option("--write", help="Allow statements that change the database "
                                        "(INSERT, UPDATE, DELETE, DROP, ...).")] = False,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Print at most this many rows (0: no limit); "
                                          "stderr says when more were left out.")] = SQL_MAX_ROWS,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop the query after this many seconds "
                                           "(0: no limit).")] = 300.0,
) -> None:
    """Run a SQL query on the results database (the [bold]results[/bold] view is the public surface).

    Read-only unless [bold]--write[/bold]: the database itself refuses any change (a read-only
    transaction) and, on SQLite, ATTACH (which would create a file). A reader never waits for
    another orch process's write. At most [bold]--max-rows[/bold] rows are read (100,000 unless
    given), and at most 512 MiB of values, for at most [bold]--timeout[/bold] seconds, so a runaway
    query can neither fill the memory nor run for ever."""
    from orchestrator.results import sql_bounds
    from orchestrator.results.db.engine import open_engine
    from orchestrator.results.queries import run_query

    if fmt not in ("table", "csv", "json"):
        raise UserError(f"--format: expected table, csv or json, got {fmt!r}")
    sql_bounds.check_max_rows(max_rows)
    sql_bounds.check_timeout(timeout)
    if (query is None) == (file is None):
        raise UserError("give a query or --file FILE (one of them)")
    if file is not None:
        from orchestrator.safefile import RefusedFile, read_regular

        try:
            # Never open() a FIFO or device blindly: one without a writer hangs orch for good.
            query = read_regular(file, SQL_FILE_LIMIT).decode("utf-8")
        except RefusedFile as exc:
            raise UserError(f"{file}: {exc}") from None
        except OSError as exc:
            raise UserError(f"{file}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise UserError(f"{file}: not UTF-8 text ({exc.reason})") from None
    assert query is not None
    c = orch_context(ctx)
    require_database(c)
    engine = c.engine if write else open_engine(c.db_url, read_only=True)
    answer = run_query(engine, query, write, max_rows, timeout)
    if answer.columns is None:
        console.print(f"ok ({answer.affected} row(s) affected)")
        return
    if answer.left_out:
        err_console.print(f"note: {answer.left_out}", markup=False, soft_wrap=True)
    print_rows(answer.columns, answer.rows, fmt)


def export(
    ctx: typer.Context,
    fmt: Annotated[str, typer.Option("--format", "-f", help="csv, json or parquet.")] = "csv",
    view: Annotated[str, typer.Option("--view", help="What to export: " + ", ".join(EXPORTABLE) + ".")] = "results",
    sweep: SweepOpt = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout; "
                                                   "required for parquet).")] = None,
) -> None:
    """Export a view (default [bold]results[/bold]) as CSV, JSON or Parquet."""
    from orchestrator.results.queries import view_rows
    from orchestrator.safefile import replace_file

    if fmt not in ("csv", "json", "parquet"):
        raise UserError(f"--format: expected csv, json or parquet, got {fmt!r}")
    if view not in EXPORTABLE:
        raise UserError(f"--view: expected one of {', '.join(EXPORTABLE)}, got {view!r}"
                        f"{did_you_mean(view, EXPORTABLE)}")
    if fmt == "parquet" and output is None:
        raise UserError("--format parquet needs --output FILE")
    if output is not None and (output.is_dir() or str(output).endswith(("/", os.sep))):
        raise UserError(f"--output {output}: a folder; expected the file to write")
    c = orch_context(ctx)
    require_database(c)
    columns, rows = view_rows(c.sessions, view, sweep)
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ModuleNotFoundError:
            raise UserError("parquet export needs pyarrow: pip install 'orch[parquet]'") from None
        from orchestrator.cli.output import jsonable

        table = pa.table({name: [jsonable(row[i]) for row in rows] for i, name in enumerate(columns)})
        assert output is not None
        # pyarrow removes its output when a write fails (it removed /dev/full as root): write to
        # memory, then through replace_file, which deletes nothing orch did not make.
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        try:
            replace_file(output, sink.getvalue().to_pybytes())
        except OSError as exc:  # a missing folder, no permission, disk full
            raise UserError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
        err_console.print(f"wrote {len(rows)} row(s) to {output}")
        return
    if output is None:
        print_rows(columns, rows, fmt)
        return
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_rows(columns, rows, fmt)
    try:
        replace_file(output, buffer.getvalue().encode())
    except OSError as exc:  # a missing folder, no permission, disk full
        raise UserError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    err_console.print(f"wrote {len(rows)} row(s) to {output}")


def report(
    ctx: typer.Context,
    output: Annotated[str, typer.Option("--output", "-o", help="report.html (one self-contained page), or DIR/ "
                                        "(DIR/index.html and DIR/figures/*.svg, *.png).")],
    sweep: Annotated[Optional[list[str]], typer.Option("--sweep", help="Only the runs of this sweep "
                                                       "(repeatable).")] = None,
) -> None:
    """The studies' figures from the database: one HTML page that works offline, every mark linked to its run."""
    from orchestrator.results.db.engine import redact
    from orchestrator.results.report import build_report

    c = orch_context(ctx)
    require_database(c)
    directory = output.endswith(("/", os.sep)) or Path(output).is_dir()
    done = build_report(c.engine, Path(output), directory, sweep or [], redact(c.db_url))
    err_console.print(f"wrote {done.page}: {len(done.drawn)} figure(s) ({', '.join(done.drawn) or 'none'}), "
                      f"{done.runs} run(s) in provenance"
                      + (f", {len(done.files)} figure file(s)" if done.files else ""))
    for skip in done.skipped:
        err_console.print(f"  not drawn: {skip.title}: {skip.reason}", markup=False, highlight=False)


