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


def run_listing(engine: Engine, statuses: tuple[str, ...], sweep: str | None = None,
                site: str | None = None) -> list[dict[str, object]]:
    """Each run in one of ``statuses`` with its last attempt: failure class, exit code, reason
    (the scheduler's or orch's words; a skipped run's skip reason) and its error log's path."""
    where, params = _filters(sweep, site)
    where = where.replace("sweep =", "r.sweep =").replace("site =", "r.site =")
    names = ", ".join(f":s{i}" for i in range(len(statuses)))
    params.update({f"s{i}": s for i, s in enumerate(statuses)})  # type: ignore[dict-item]
    query = text(
        "SELECT r.id, r.sweep, r.experiment, r.workload, r.site, r.system, r.status, r.run_dir, r.skip_reason, "
        "a.number, a.job_id, a.failure_class, a.exit_code, a.reason FROM runs r "
        "LEFT JOIN attempts a ON a.run_id = r.id "
        "AND a.number = (SELECT MAX(number) FROM attempts WHERE run_id = r.id) "
        f"WHERE r.status IN ({names}){where} ORDER BY r.sweep, r.experiment, r.id")
    listing: list[dict[str, object]] = []
    with engine.connect() as connection:
        for row in connection.execute(query, params):
            log = f"{row.run_dir}/stderr.log" if row.run_dir and row.number is not None else None
            listing.append({
                "run_id": row.id, "sweep": row.sweep, "experiment": row.experiment, "workload": row.workload,
                "site": row.site + (f":{row.system}" if row.system else ""), "status": row.status,
                "attempt": row.number, "job_id": row.job_id, "failure_class": row.failure_class,
                "exit_code": row.exit_code, "reason": row.reason or row.skip_reason, "log": log})
    return listing
