"""The ``orch`` command line: the main app, its commands in the order of the flow, and ``main()``.

Each command lives in the module of its group (plan, flow, run_sweep, query, results, sites,
predict, ...) and is a thin edge over one stage; this module only puts them together. A mistake
in the user's input prints one line (``error: file:line: field: what was expected``) and exits 2.
"""

from __future__ import annotations

import errno
import inspect
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from typer.core import TyperGroup

from orchestrator import __version__, paths
from orchestrator.cli import (
    db,
    flow,
    follow,
    plan,
    predict,
    query,
    regressions,
    results,
    run_sweep,
    sandbox,
    sites,
    workloads,
)
from orchestrator.cli.common import Context
from orchestrator.cli.output import console, err_console
from orchestrator.errors import UserError
from orchestrator.escape import printable

# Every command and group of `orch`, in the order `orch --help` lists them: the flow of a campaign
# (plan, submit, follow, run), then reading its results, the sites, predictions, and the rest.
COMMANDS: tuple[tuple[str, "Callable[..., Any] | typer.Typer"], ...] = (
    ("plan", plan.plan),
    ("submit", flow.submit),
    ("status", flow.status),
    ("run", run_sweep.run),
    ("again", regressions.again),
    ("sql", query.sql),
    ("export", query.export),
    ("report", query.report),
    ("regressions", regressions.regressions),
    ("references", results.references_app),
    ("glossary", results.glossary),
    ("sites", sites.sites_app),
    ("predict", predict.predict),
    ("calibrate", predict.calibrate),
    ("cancel", flow.cancel),
    ("follow", follow.follow_app),
    ("workloads", workloads.workloads_app),
    ("db", db.db_app),
    ("sandbox", sandbox.sandbox_app),
)


class FlowOrder(TyperGroup):
    """Lists the commands in the order of :data:`COMMANDS` (typer lists commands before groups)."""

    def list_commands(self, ctx: Any) -> list[str]:
        order = [name for name, _ in COMMANDS]
        return sorted(super().list_commands(ctx), key=lambda name: order.index(name) if name in order else len(order))


app = typer.Typer(cls=FlowOrder, add_completion=False, rich_markup_mode="rich", pretty_exceptions_enable=False,
                  help="Benchmark campaigns of AI workloads on HPC sites: one sweep file to SQL rows.\n\n"
                       "Quick start: [bold]orch run examples/quickstart.yaml --site local[/bold]")
for _name, _target in COMMANDS:
    if isinstance(_target, typer.Typer):
        app.add_typer(_target, name=_name)
    else:
        app.command(_name)(_target)


@app.callback(invoke_without_command=True)
def main_options(
    ctx: typer.Context,
    db: Annotated[Optional[str], typer.Option("--db", envvar="ORCH_DB_URL", show_envvar=True,
                                              help="Database URL (default: sqlite under .orch/ here).")] = None,
    sites_dir: Annotated[Optional[list[Path]], typer.Option(
        "--sites-dir",
        help="Extra directory of site YAML files (before $ORCH_SITES_PATH and the built-in ones).")] = None,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        console.print(f"orch {__version__}")
        raise typer.Exit()
    if ctx.invoked_subcommand is None:
        console.print(ctx.get_help())
        raise typer.Exit()
    state = paths.state_dir()
    ctx.obj = Context(db_url=db or paths.default_db_url(), sites_dirs=list(sites_dir or []), state_dir=state)
    # The URL may hold a password: jobs started from here must not inherit it.
    os.environ.pop(paths.DB_URL_ENV, None)


def _reflow(doc: str) -> str:
    """A docstring as --help should show it: each paragraph's lines joined (rich markup mode keeps a
    docstring's line breaks, so paragraphs came out ragged), lists and indented examples as written."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines = paragraph.split("\n")
        # a list item is "- " or "* ": a wrapped line that begins with an option (--seq) is prose
        as_written = any(line.startswith((" ", "- ", "* ", "\b", "|")) for line in lines)
        paragraphs.append(paragraph if as_written else " ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


def _reflow_help(typer_app: typer.Typer) -> None:
    for command in typer_app.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            command.help = _reflow(command.callback.__doc__)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _reflow_help(group.typer_instance)


def _check_argv(argv: list[str]) -> None:
    """Refuse an argument that is not UTF-8: Python hands it over with lone surrogates in place of
    its bytes, which no database, file name, terminal or log line of orch can encode (a
    UnicodeEncodeError wherever it went first)."""
    for index, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = arg.encode("utf-8", "surrogateescape")
            raise UserError(f"argument {index} ({ascii(raw)[2:-1]}): not valid UTF-8; orch reads its arguments "
                            "as UTF-8 text (rename the file, or set a UTF-8 locale)") from None


def main() -> None:
    try:
        _check_argv(sys.argv[1:])
        app()  # standalone: click prints usage errors itself and exits 2
    except UserError as exc:  # its message may quote a value: escaped, never acted on by the terminal
        err_console.print(printable(f"error: {exc}"), markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(exc.exit_code) from None
    except OSError as exc:  # the disk is full or read-only under a file orch writes: no traceback
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(printable(f"error: {where}{exc.strerror}; nothing after this point was done (free "
                                    "space, or set ORCH_HOME to another disk, and run the command again)"),
                          markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
    except Exception as exc:
        # The database refused (read-only file, disk full, gone away): SQLAlchemy's OperationalError.
        # Only a command that imported SQLAlchemy can raise it, so it is looked up, not imported.
        # The failed transaction is rolled back, so a repeat after the fix starts clean.
        sa_exc = sys.modules.get("sqlalchemy.exc")
        if sa_exc is None or not isinstance(exc, sa_exc.OperationalError):
            raise
        err_console.print(f"error: database: {str(exc.orig).splitlines()[0]}", markup=False, highlight=False,
                          soft_wrap=True)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        err_console.print("interrupted: nothing is lost; `orch status` picks up where this stopped")
        raise SystemExit(130) from None


_reflow_help(app)  # every command is registered by now
