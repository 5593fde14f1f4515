"""The questions the command line asks the results database, one named function each.

The CLI prints what these return and holds no SQL of its own: a query here is read, tested and
changed in one place, and its rows come back with named fields (a column moved in a view cannot
silently shift what a command prints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from orchestrator.errors import UserError
from orchestrator.results import EXPORTABLE
from orchestrator.results.db.models import Run
from orchestrator.states import RunState

if TYPE_CHECKING:
    from sqlalchemy import CursorResult, Engine
    from sqlalchemy.orm import Session, sessionmaker

    Sessions = sessionmaker[Session]

# What `orch run` prints of each run of its sweep: its last attempt's row of the results view.
SWEEP_RESULT_COLUMNS = ("run_id", "experiment", "workload", "site", "devices", "precision", "strategy", "params",
                        "status", "failure_class", "tflops", "tokens_per_s", "step_time_s", "peak_mem_gb")

REFERENCE_COLUMNS = ("id", "name", "workload", "site", "system", "precision", "devices", "params", "metric",
                     "value", "tolerance", "source")

# A run that has (or may have) a job with a scheduler.
IN_FLIGHT = (RunState.SUBMITTING, RunState.SUBMITTED, RunState.RUNNING)


def _scoped(query: Any, sweep: str | None, site: str | None) -> Any:
    """``query`` narrowed to the runs of ``sweep`` and/or ``site`` (either left out: any)."""
    for column, value in ((Run.sweep, sweep), (Run.site, site)):
        if value:
            query = query.where(column == value)
    return query


def skip_reasons(sessions: "Sessions", sweep: str | None, site: str | None, limit: int = 3) -> list[tuple[str, int]]:
    """The commonest reasons runs in scope were skipped, most frequent first, with their counts."""
    query = _scoped(select(Run.skip_reason, func.count()).where(Run.status == RunState.SKIPPED), sweep, site)
    with sessions() as session:
        found = session.execute(query.group_by(Run.skip_reason).order_by(func.count().desc()).limit(limit))
        return [(reason, count) for reason, count in found]


def retry_ids(sessions: "Sessions", sweep: str | None, site: str | None) -> list[str]:
    """The runs in scope waiting to be submitted again."""
    with sessions() as session:
        return list(session.scalars(_scoped(select(Run.id).where(Run.status == RunState.RETRY), sweep, site)))


def in_flight_count(sessions: "Sessions", sweep: str, site: str | None) -> int:
    """How many runs of ``sweep`` (on ``site``) are with a scheduler: submitting, submitted or running."""
    query = select(func.count()).select_from(Run).where(Run.status.in_(IN_FLIGHT))
    with sessions() as session:
        return session.scalar(_scoped(query, sweep, site)) or 0


def sweep_results(sessions: "Sessions", sweep: str, site: str | None) -> list[dict[str, Any]]:
    """Each run of ``sweep`` (on ``site``) with its last attempt's results row, by
    :data:`SWEEP_RESULT_COLUMNS`, in the order of its experiments, workloads, devices and precisions."""
    query = (f"SELECT {', '.join(SWEEP_RESULT_COLUMNS)} FROM results r WHERE sweep = :sweep "
             "AND attempt = (SELECT MAX(attempt) FROM results r2 WHERE r2.run_id = r.run_id)"
             + (" AND site = :site" if site else "") + " ORDER BY experiment, workload, devices, precision, run_id")
    with sessions() as session:
        return [dict(row._mapping) for row in session.execute(text(query), {"sweep": sweep, "site": site})]


def p99_notes(sessions: "Sessions", sweep: str) -> dict[str, str]:
    """The inference view's p99_note of each run of ``sweep`` that has one, by run id (the last
    attempt's): a p99 from a handful of iterations is said beside it."""
    with sessions() as session:
        found = session.execute(text("SELECT run_id, attempt, p99_note FROM inference WHERE sweep = :sweep "
                                     "AND p99_note IS NOT NULL ORDER BY attempt"), {"sweep": sweep})
        return {run_id: note for run_id, _, note in found}


def view_rows(sessions: "Sessions", view: str, sweep: str | None) -> tuple[list[str], list[list[Any]]]:
    """The columns and rows of one of :data:`EXPORTABLE` (of one sweep's runs, when given)."""
    if view not in EXPORTABLE:  # a name is spliced into the query: only these
        raise ValueError(f"not an exportable view: {view!r}")
    # attempts has no sweep column: its runs' sweep decides.
    by_sweep = " WHERE run_id IN (SELECT id FROM runs WHERE sweep = :sweep)" if view == "attempts" \
        else " WHERE sweep = :sweep"
    with sessions() as session:
        result = session.execute(text(f"SELECT * FROM {view}" + (by_sweep if sweep else "")),
                                 {"sweep": sweep} if sweep else {})
        return list(result.keys()), [list(r) for r in result]


def reference_rows(sessions: "Sessions") -> list[dict[str, Any]]:
    """The stored reference figures, by :data:`REFERENCE_COLUMNS`, by workload and metric."""
    with sessions() as session:
        found = session.execute(text(f"SELECT {', '.join(REFERENCE_COLUMNS)} FROM reference_figures "
                                     "ORDER BY workload, metric, id"))
        return [dict(row._mapping) for row in found]


@dataclass
class QueryAnswer:
    """What a person's query gave: rows (``columns`` not None) or a count of rows changed."""

    columns: list[str] | None
    rows: list[list[Any]]
    affected: int = 0
    left_out: str = ""  # which bound (rows, bytes) left rows out, said to the person; "" when none did

    @property
    def more(self) -> bool:
        return bool(self.left_out)


def run_query(engine: "Engine", query: str, write: bool, max_rows: int,
              timeout_s: float = 0.0) -> QueryAnswer:
    """Run a person's SQL (`orch sql`): on a read-only engine unless ``write``, at most ``max_rows``
    rows (0: all) and :data:`sql_bounds.SQL_MAX_BYTES` read, for at most ``timeout_s`` seconds (0:
    no limit); what the database refuses is a UserError saying why, nothing changed."""
    from orchestrator.results import sql_bounds
    from orchestrator.results.db.engine import (
        ATTACH_REFUSED,
        is_read_only_refusal,
        is_several_statements,
        session_factory,
    )

    with session_factory(engine)() as session, sql_bounds.time_limit(session, timeout_s):
        try:
            # A statement's result is a CursorResult (returns_rows, rowcount), whatever the statement.
            result: CursorResult[Any] = session.execute(text(query))  # type: ignore[assignment]
        except DBAPIError as exc:
            if sql_bounds.is_timeout(exc):
                raise
            if not write and ATTACH_REFUSED in str(exc.orig):
                raise UserError("orch sql is read-only: ATTACH and VACUUM INTO are refused (they would open "
                                "or create another file); nothing was changed") from None
            if not write and is_several_statements(exc):
                raise UserError("orch sql without --write runs one statement per call; this text holds "
                                "more than one (nothing was changed)") from None
            if not write and is_read_only_refusal(exc):
                raise UserError("orch sql is read-only: this statement would change the database "
                                "(nothing was changed; add --write to allow it)") from None
            raise UserError(f"SQL error: {str(exc.orig).splitlines()[0]}") from None
        if not result.returns_rows:
            session.commit()
            return QueryAnswer(None, [], affected=result.rowcount)
        columns = list(result.keys())
        rows, left_out = sql_bounds.fetch_bounded(result, max_rows)
    return QueryAnswer(columns, rows, left_out=left_out)
