"""`orch run`: plan, submit and follow one sweep to the end, then print its results.

Each step is the stage the single commands use (orchestrator/plan/, orchestrator/run/, the queries
of orchestrator/results/queries.py); this module chains them and says what happened.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from orchestrator.cli.common import (
    DEFAULT_MAX_RUNS,
    Context,
    IntervalOpt,
    JsonOpt,
    MaxRunsOpt,
    SiteOpt,
    SweepFileArg,
    VariantOpt,
    check_interval,
    orch_context,
    site_check,
)
from orchestrator.cli.flow import follow_runs, why_nothing
from orchestrator.cli.output import err_console, print_rows, trace_progress
from orchestrator.cli.plan import print_lints
from orchestrator.errors import UserError
from orchestrator.states import AttemptState

if TYPE_CHECKING:
    from orchestrator.run.submit import Executors


def run(
    ctx: typer.Context,
    sweep_file: SweepFileArg,
    site: SiteOpt = None,
    interval: IntervalOpt = 2.0,
    variant: VariantOpt = None,
    max_runs: MaxRunsOpt = DEFAULT_MAX_RUNS,
    as_json: JsonOpt = False,
) -> None:
    """Plan, submit and follow a sweep to the end, then print its results.

    With [bold]--site S[/bold] only the sweep's runs on S are submitted; a site the sweep does not
    name is refused (exit 2), and exit 1 when every run on it is skipped."""
    check_interval(interval)  # before anything is planned or submitted
    from orchestrator.run import interrupt

    c = orch_context(ctx)
    with interrupt.watching():
        _run_sweep(c, sweep_file, site, interval, variant, max_runs, as_json)


def _run_sweep(c: Context, sweep_file: Path, site: str | None, interval: float, variant: str | None,
               max_runs: int, as_json: bool) -> None:
    """`orch run` under a Ctrl-C that is never lost (see orchestrator/run/interrupt.py)."""
    from orchestrator.plan.record import plan_sweep, record_plan
    from orchestrator.plan.sweep import parse_sweep
    from orchestrator.results.db.engine import redact
    from orchestrator.run import interrupt
    from orchestrator.run.submit import submit_runs

    loaded = parse_sweep(sweep_file, variant=variant, max_runs=max_runs, check_site=site_check(c))
    if site is not None:
        _check_sweep_names_site(loaded.sweep, site, sweep_file)
    with trace_progress():
        plans = plan_sweep(loaded, c.state_dir / "runs", sites_dirs=c.sites_dirs)
    interrupt.check()
    print_lints(plans, loaded)
    recorded = record_plan(c.sessions, loaded, plans)
    interrupt.check()
    name = loaded.sweep.name
    mine = [p for p in plans if site is None or p.spec.site == site]
    if not any(not p.resolved.skipped for p in mine):
        reasons = sorted({p.resolved.skip_reason or "" for p in mine})
        err_console.print(f"error: sweep {name}: nothing to run{f' on {site}' if site else ''}: every one of its "
                          f"{len(mine)} run(s) is skipped ({'; '.join(reasons[:3])})", markup=False, soft_wrap=True)
        raise typer.Exit(1)
    if not as_json:
        skipped = sum(1 for p in plans if p.resolved.skipped)
        err_console.print(f"sweep {name}: {len(plans)} runs ({skipped} skipped), {recorded.new} new; "
                          f"db {redact(c.db_url)}")
        for line in recorded.lines():
            err_console.print(f"re-planned: {line}", markup=False, soft_wrap=True)
    executors = c.executors()
    try:
        report = submit_runs(c.sessions, executors, site=site, sweep=name)
        for run_id, why in report.failed:
            err_console.print(f"  refused {run_id}: {why}", markup=False, soft_wrap=True)
        follow_runs(c, executors, name, site, interval, watch=True, quiet=as_json, submit_planned=True)
    except KeyboardInterrupt:
        _stop_on_interrupt(c, executors, name, site, sweep_file)
        raise
    _print_results(c, name, site, as_json)


def _print_results(c: Context, sweep: str, site: str | None, as_json: bool) -> None:
    """The last attempt's results row of each run; exit 1 when any did not complete (or none ran)."""
    from orchestrator.results.queries import SWEEP_RESULT_COLUMNS, p99_notes, sweep_results

    results = sweep_results(c.sessions, sweep, site)
    if not results:  # every runnable run was dropped or handed back before it ran
        err_console.print(f"error: sweep {sweep}: nothing ran: {why_nothing(c, sweep, site)}", markup=False,
                          soft_wrap=True)
        raise typer.Exit(1)
    if not as_json:  # params as compact k=v for people (harness settings left out); JSON keeps all
        for result in results:
            result["params"] = " ".join(f"{k}={v}" for k, v in json.loads(result["params"] or "{}").items()
                                        if k not in ("warmup", "iters"))
    columns: list[str] = list(SWEEP_RESULT_COLUMNS)
    # A p99 from a handful of iterations is said beside it (issue 27); the inference view is read
    # only when an inference run is there (it pivots every metric value).
    notes = p99_notes(c.sessions, sweep) if any(r["workload"] == "llm_inference" for r in results) else {}
    if notes:
        columns.append("note")
        for result in results:
            result["note"] = notes.get(result["run_id"])
    rows: list[list[Any]] = [[result[column] for column in columns] for result in results]
    print_rows(columns, rows, "json" if as_json else "table", title=f"results of {sweep}")
    if any(result["status"] != AttemptState.COMPLETED for result in results):  # the last attempt's
        raise typer.Exit(1)


def _check_sweep_names_site(sweep: object, site: str, sweep_file: Path) -> None:
    """``orch run SWEEP --site S`` runs the sweep's runs on S: a site the sweep does not name is a
    mistake (running the sweep elsewhere would be a different sweep), refused before anything is
    recorded."""
    named = sorted({target for exp in sweep.experiments for target in exp.sites})  # type: ignore[attr-defined]
    if site not in named and site not in {t.partition(":")[0] for t in named}:
        raise UserError(f"{sweep_file}: --site {site}: the sweep does not name this site (its sites: "
                        f"{', '.join(named)}); edit its sites: or use a --variant that names {site}")


def _stop_on_interrupt(c: Context, executors: "Executors", sweep: str, site: str | None, sweep_file: Path) -> None:
    """A Ctrl-C of `orch run`: the jobs it started on this machine stop and their runs are planned
    again (running the same command resumes); jobs on a scheduler stay queued, as batch jobs do."""
    from orchestrator.results.queries import in_flight_count
    from orchestrator.run.follow import stop_local

    err_console.print("interrupted: stopping this sweep's local jobs (Ctrl-C again leaves them running)",
                      markup=False)
    stopped, lingering = stop_local(c.sessions, executors, sweep, site)
    elsewhere = in_flight_count(c.sessions, sweep, site)
    if stopped:
        err_console.print(f"stopped {len(stopped)} local job(s); their runs are planned again", markup=False)
    if lingering:
        err_console.print(f"{len(lingering)} local job(s) had not exited yet (controller pids {', '.join(lingering)})",
                          markup=False)
    if elsewhere:
        err_console.print(f"{elsewhere} run(s) stay with their scheduler; `orch status` follows them, "
                          f"`orch cancel --sweep {sweep}` stops them", markup=False, soft_wrap=True)
    err_console.print(f"resume with: orch run {shlex.quote(str(sweep_file))}", markup=False, soft_wrap=True)
