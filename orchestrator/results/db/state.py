"""How many runs are in each state, and whether anything needs following: plain SQL on an engine.

`orch status` starts with these two questions; answering them without the ORM, the
executors or the scheduler keeps it quick when nothing is in flight.
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from orchestrator.states import AttemptState, RunState

# Attempt states the scheduler still has to be asked about (see orchestrator.run.follow).
ACTIVE_ATTEMPTS = (AttemptState.SUBMITTING, AttemptState.PENDING, AttemptState.RUNNING)


def _filters(sweep: str | None, site: str | None) -> tuple[str, dict[str, str]]:
    clauses, params = [], {}
    if sweep:
        clauses.append("sweep = :sweep")
        params["sweep"] = sweep
    if site:
        clauses.append("site = :site")
        params["site"] = site
    return "".join(f" AND {c}" for c in clauses), params


def state_counts(engine: Engine, sweep: str | None = None, site: str | None = None) -> dict[str, int]:
    """Runs per status, optionally of one sweep and/or site."""
    where, params = _filters(sweep, site)
    with engine.connect() as connection:
        rows = connection.execute(text(f"SELECT status, COUNT(*) FROM runs WHERE 1 = 1{where} GROUP BY status"),
                                  params)
        return {status: count for status, count in rows}


def needs_follow(engine: Engine, sweep: str | None = None, site: str | None = None) -> bool:
    """Whether a poll has anything to do: an attempt the scheduler has (or may have), which a poll
    asks about whatever the filters, or a run of these filters waiting to be resubmitted."""
    where, params = _filters(sweep, site)
    active = ", ".join(f"'{state}'" for state in ACTIVE_ATTEMPTS)
    with engine.connect() as connection:
        if connection.execute(text(f"SELECT 1 FROM attempts WHERE state IN ({active}) LIMIT 1")).first():
            return True
        return connection.execute(text(f"SELECT 1 FROM runs WHERE status = '{RunState.RETRY}'{where} LIMIT 1"),
                                  params).first() is not None
