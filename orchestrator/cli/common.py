"""What every command module shares: orch's context, the options several commands take (declared
once here, with one help text each) and the checks that come before a command's work.

The command groups live in modules of their own, registered on the main app by
orchestrator/cli/app.py; they read the context the main app's callback made from the root of typer's
context (:func:`orch_context`) instead of importing app.py (which imports them: a cycle).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from orchestrator import paths
from orchestrator.cli.output import err_console
from orchestrator.errors import UserError

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from orchestrator.run.submit import Executors

# SQLAlchemy, the ORM, the executors and the stage modules are imported by the commands that use
# them: `orch plan --dry-run` never touches the database and `orch status` with nothing in flight
# needs no ORM, so both answer without paying for imports they do not use (SQLAlchemy alone is
# about 0.15 s of start-up).

DEFAULT_MAX_RUNS = 50_000  # orchestrator.plan.sweep.DEFAULT_MAX_RUNS (not imported: start-up time)
# time.sleep() refuses what does not fit a C timeout (OverflowError); a day between polls is
# already no follower.
MAX_INTERVAL_S = 86_400

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]
SiteOpt = Annotated[Optional[str], typer.Option("--site", help="Only the runs on this site.")]
SweepOpt = Annotated[Optional[str], typer.Option("--sweep", help="Only the runs of this sweep (its name).")]
SweepFileArg = Annotated[Path, typer.Argument(help="The sweep YAML file.")]
VariantOpt = Annotated[Optional[str], typer.Option("--variant", help="Apply the sweep's named variant "
                                                   "(e.g. tiny) first.")]
MaxRunsOpt = Annotated[int, typer.Option("--max-runs", help="Refuse a sweep that expands to more runs than this.")]
IntervalOpt = Annotated[float, typer.Option("--interval", help="Seconds between polls.")]


@dataclass
class Context:
    """What the main app's options decide for every command: the database, where sites are, where state is."""

    db_url: str
    sites_dirs: list[Path]
    state_dir: Path
    _engine: "Engine | None" = None
    _sessions: "sessionmaker[Session] | None" = None

    @property
    def engine(self) -> "Engine":
        """The database, migrated to the newest schema on first use."""
        if self._engine is None:
            from orchestrator.results.db.engine import open_engine

            self._engine = open_engine(self.db_url)
        return self._engine

    @property
    def sessions(self) -> "sessionmaker[Session]":
        if self._sessions is None:
            from orchestrator.results.db.engine import session_factory

            self._sessions = session_factory(self.engine)
        return self._sessions

    def executors(self) -> "Executors":
        from orchestrator.run.submit import Executors

        return Executors(self.state_dir, self.sites_dirs)


def orch_context(ctx: typer.Context) -> Context:
    """orch's Context (database URL, sites directories, state directory), set by the main app's callback."""
    found = ctx.find_root().obj
    assert isinstance(found, Context), "the main app's callback sets the context"
    return found


def site_check(c: Context) -> Any:
    """Looks a site of the sweep up on the search path (unknown: UserError), for parse_sweep to
    report an unknown site with the sweep's other errors."""
    from orchestrator.sites.profiles import load_site

    return lambda target: load_site(target, c.sites_dirs)


def check_interval(interval: float) -> None:
    """Seconds between polls: a negative one made time.sleep() raise, nan and inf one a traceback
    or a poll that never comes."""
    if not 0 < interval <= MAX_INTERVAL_S:  # nan compares False with everything
        raise UserError(f"--interval {interval}: expected seconds between polls, more than 0 and at most "
                        f"{MAX_INTERVAL_S:,} (a day)")


def missing_database(c: Context) -> str | None:
    """The one-line hint when orch looks for its default SQLite file here and none exists (None
    otherwise): a command run from the wrong folder neither creates an empty .orch/ nor reports
    "total 0" as if the campaign had vanished. A database named on purpose (--db, $ORCH_DB_URL,
    $ORCH_HOME) is opened, and created, as usual."""
    if os.environ.get(paths.HOME_ENV) or c.db_url != paths.default_db_url():
        return None
    database = c.state_dir / "orch.db"
    if database.exists():
        return None
    return (f"no orch database here ({database} does not exist): run orch in the folder you planned "
            "from, or point at the database with ORCH_HOME or --db")


def no_database_here(c: Context) -> bool:
    """Whether :func:`missing_database` has a hint: printed on stderr (`orch status` then reports nothing)."""
    hint = missing_database(c)
    if hint is not None:
        err_console.print(hint, markup=False, soft_wrap=True)
    return hint is not None


def require_database(c: Context) -> None:
    """A read command (sql, export, report) where no database is: the hint as its error (exit 2),
    nothing created."""
    hint = missing_database(c)
    if hint is not None:
        raise UserError(hint)
