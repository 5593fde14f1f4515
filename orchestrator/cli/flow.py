"""`orch submit`, `orch status` and `orch cancel`: runs handed to their schedulers, followed and stopped.

The work is orchestrator/run/ (submit, follow) and the counts orchestrator/results/; this module
asks and prints. :func:`follow_runs` is the polling loop `orch status --watch` and `orch run` share.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from orchestrator.cli.common import (
    Context,
    IntervalOpt,
    JsonOpt,
    SiteOpt,
    SweepOpt,
    check_interval,
    no_database_here,
    orch_context,
)
from orchestrator.cli.output import console, err_console, print_json, print_table
from orchestrator.errors import UserError
from orchestrator.escape import printable
from orchestrator.states import RunState

if TYPE_CHECKING:
    from orchestrator.run.submit import Executors


def submit(
    ctx: typer.Context,
    site: SiteOpt = None,
    sweep: SweepOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be submitted.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Submit planned runs to their site's scheduler (each run exactly once).

    Exit 1 when nothing was submitted (no run planned or waiting for a retry, or every submission
    held back because the scheduler could not be reached), saying where the runs are and why the
    skipped ones were skipped; re-planning the sweep updates runs not yet submitted."""
    from orchestrator.results.db.engine import redact
    from orchestrator.results.db.state import state_counts
    from orchestrator.run.submit import submit_runs

    c = orch_context(ctx)
    if (site or sweep) and not state_counts(c.engine, sweep, site):
        what = " and ".join(f"{k} {v}" for k, v in (("sweep", sweep), ("site", site)) if v)
        raise UserError(f"no runs of {what} in {redact(c.db_url)} (plan a sweep that names it first: "
                        "orch plan SWEEP)")
    report = submit_runs(c.sessions, c.executors(), site=site, sweep=sweep, dry_run=dry_run)
    # A run held back because the server could not be reached was not submitted (it cannot have
    # reached the scheduler): a submit where that is all that happened fails, for PBS and Slurm alike.
    reached = [d for d in report.deferred if d not in report.unreached]
    nothing = not (dry_run or report.submitted or report.failed or reached)
    empty_reason = ""
    if nothing:
        empty_reason = (_why_unreached(report.unreached) if report.unreached else why_nothing(c, sweep, site))
    if as_json:
        print_json({"submitted": [{"run_id": r, "job_id": j} for r, j in report.submitted],
                    "failed": [{"run_id": r, "reason": why} for r, why in report.failed],
                    "deferred": [{"run_id": r, "reason": why} for r, why in report.deferred],
                    "unreached": [{"run_id": r, "reason": why} for r, why in report.unreached],
                    "would_submit": report.would_submit, "scheduler_calls": report.calls,
                    **({"nothing_submitted": empty_reason} if nothing else {})})
        if nothing or (report.failed and not report.submitted):
            raise typer.Exit(1)
        return
    if dry_run:
        console.print(f"would submit {len(report.would_submit)} run(s)")
        for run_id in report.would_submit:
            console.print(f"  {run_id}")
        return
    if nothing:
        scope = " of " + " and ".join(f"{k} {v}" for k, v in (("sweep", sweep), ("site", site)) if v) \
            if (site or sweep) else ""
        head = "nothing submitted" if report.unreached else "nothing to submit"
        err_console.print(f"{head}{scope}: {empty_reason}", markup=False, soft_wrap=True)
        raise typer.Exit(1)
    console.print(f"submitted {len(report.submitted)} run(s)" +
                  (f"; {len(report.failed)} refused" if report.failed else "") +
                  (f"; {len(reached)} held back (queue limit or no answer; `orch status` retries)"
                   if reached else "") +
                  (f"; {len(report.unreached)} not submitted (the scheduler could not be reached)"
                   if report.unreached else ""))
    for run_id, why in report.failed:
        err_console.print(f"  {run_id}: {why}", markup=False)
    if report.failed and not report.submitted:  # every run tried was refused: nothing submitted
        raise typer.Exit(1)


def _why_unreached(unreached: list[tuple[str, str]]) -> str:
    """Why no run was submitted when every submit command failed to reach the scheduler."""
    first = unreached[0][1].strip().splitlines()[0] if unreached[0][1].strip() else "no answer"
    return (f"{len(unreached)} run(s) not submitted: the scheduler could not be reached ({first}); "
            "they stay waiting and `orch submit` or `orch status` tries again once it answers")


def why_nothing(c: Context, sweep: str | None, site: str | None) -> str:
    """Why no run was handed to a scheduler: where the runs in scope are, and the commonest skip reasons."""
    from orchestrator.results.db.state import state_counts
    from orchestrator.results.queries import skip_reasons

    counts = state_counts(c.engine, sweep, site)
    if not counts:
        return "the database holds no runs (plan a sweep first: orch plan SWEEP)"
    where = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    text = f"no run is planned or waiting for a retry ({where})"
    if counts.get(RunState.SKIPPED):
        reasons = skip_reasons(c.sessions, sweep, site)
        text += "; skipped because: " + "; ".join(f"{reason} ({n})" for reason, n in reasons)
        text += ". Fix what the reasons name and plan the sweep again: re-planning updates runs not yet submitted"
    return text


def _print_counts(counts: dict[str, int], as_json: bool) -> None:
    if as_json:
        print_json({"counts": counts, "total": sum(counts.values())})
        return
    order = list(RunState)  # a run's life, in order
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    print_table(["state", "runs"], [[k, counts[k]] for k in keys] + [["total", sum(counts.values())]])


def follow_runs(c: Context, executors: "Executors", sweep: str | None, site: str | None, interval: float,
                watch: bool, quiet: bool = False, submit_planned: bool = False) -> tuple[int, dict[str, int]]:
    """Poll until nothing is active (watch) or once; returns the number of polls and the runs per
    state after the last one. Runs waiting for a retry are resubmitted; with ``submit_planned``
    (``orch run``) so are planned runs a queue limit held back."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator.results.db.state import state_counts
    from orchestrator.results.queries import retry_ids
    from orchestrator.run import interrupt
    from orchestrator.run.follow import poll_once
    from orchestrator.run.submit import submit_runs

    waiting = (RunState.SUBMITTING, RunState.SUBMITTED, RunState.RUNNING, RunState.RETRY) + (
        (RunState.PLANNED,) if submit_planned else ())
    # Written to a log (a background follower, a batch job): one timestamped line per change
    # instead of a progress bar that only a terminal can redraw.
    log_lines = watch and not quiet and not err_console.is_terminal
    last_detail = None
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=err_console,
                  disable=quiet or not watch or log_lines, transient=False) as progress:
        task = progress.add_task("runs", total=1, detail="")
        polls, warned = 0, False
        while True:
            interrupt.check()  # a Ctrl-C swallowed by a finalizer is raised here
            report = poll_once(c.sessions, executors)
            polls += 1
            if report.unrepaired and not warned and not quiet:
                # An interrupted submit cannot be repaired while the scheduler cannot be asked;
                # said once per command (the attempts' reason holds the scheduler's words).
                err_console.print(f"{report.unrepaired} run(s) stay 'submitting': the scheduler could not say "
                                  "whether their jobs reached it; a later poll asks again", markup=False)
                warned = True
            if report.read_later and not quiet:
                err_console.print(f"{report.read_later} ended run(s) wait for the next poll: one poll reads at most "
                                  "64 MiB of metrics files", markup=False)
            submit_runs(c.sessions, executors, site=site, sweep=sweep,
                        run_ids=None if submit_planned else retry_ids(c.sessions, sweep, site))
            counts = state_counts(c.engine, sweep, site)
            total = sum(v for k, v in counts.items() if k != RunState.SKIPPED)
            done = sum(counts.get(k, 0) for k in (RunState.FINISHED, RunState.FAILED, RunState.CANCELLED))
            detail = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
            progress.update(task, total=max(total, 1), completed=done, detail=detail)
            if log_lines and detail != last_detail:
                from datetime import datetime, timezone

                stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
                err_console.print(f"{stamp} poll {polls}: {done}/{total} done; {detail}", markup=False,
                                  highlight=False)
                last_detail = detail
            if not watch or not any(counts.get(k, 0) for k in waiting):
                return polls, counts
            interrupt.check()
            time.sleep(interval)


def status(
    ctx: typer.Context,
    sweep: SweepOpt = None,
    site: SiteOpt = None,
    watch: Annotated[bool, typer.Option("--watch", help="Keep following until no run is active.")] = False,
    interval: IntervalOpt = 5.0,
    failed: Annotated[bool, typer.Option("--failed", help="List the failed runs: failure class, exit code, "
                                         "reason and error log.")] = False,
    running: Annotated[bool, typer.Option("--running", help="List the runs with a scheduler now (submitted, "
                                          "running, waiting for a retry).")] = False,
    skipped: Annotated[bool, typer.Option("--skipped", help="List the skipped runs with their reasons.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Follow submitted runs: ask the scheduler (one query per site), collect metrics, retry by policy.

    Nothing in flight (no job with a scheduler, no run waiting for a retry): no scheduler is asked.
    [bold]--failed[/bold], [bold]--running[/bold] and [bold]--skipped[/bold] (any together) list those
    runs after the counts, each with its last attempt's failure class, reason and error log
    (JSON: "runs"). Run where no database is (a folder without .orch/), it says so and creates none.
    """
    from orchestrator.results.db.state import needs_follow, run_listing, state_counts

    check_interval(interval)
    c = orch_context(ctx)
    if no_database_here(c):
        if as_json:
            print_json({"counts": {}, "total": 0, "polls": 0, "scheduler_calls": {}, "database": None,
                        **({"runs": []} if failed or running or skipped else {})})
        return
    if needs_follow(c.engine, sweep, site):
        executors = c.executors()
        polls, counts = follow_runs(c, executors, sweep, site, interval, watch, quiet=as_json)
        calls = executors.calls()
    else:
        polls, counts, calls = 0, state_counts(c.engine, sweep, site), {}
    wanted = ((RunState.FAILED,) if failed else ()) + ((RunState.SKIPPED,) if skipped else ()) + (
        (RunState.SUBMITTING, RunState.SUBMITTED, RunState.RUNNING, RunState.RETRY) if running else ())
    runs = run_listing(c.engine, wanted, sweep, site) if wanted else None
    if as_json:
        print_json({"counts": counts, "total": sum(counts.values()), "polls": polls, "scheduler_calls": calls,
                    **({"runs": runs} if runs is not None else {})})
        return
    _print_counts(counts, as_json)
    if runs is not None:
        _print_listing(runs)


def _print_listing(runs: list[dict[str, Any]]) -> None:
    """One short block per run (a table of long reasons and paths wraps into tall cells): what it
    is, how its last attempt ended, why, and the log to read; paths on a line of their own, whole."""
    if not runs:
        console.print("no run matches", markup=False)
    for run in runs:
        end = run["failure_class"] or ""
        if run["exit_code"] is not None and run["status"] == RunState.FAILED:
            end += f" (exit {run['exit_code']})"
        attempt = f"attempt {run['attempt']}" if run["attempt"] is not None else "never submitted"
        console.print(printable(f"{run['status']:<9} {run['run_id']}  {run['sweep']}/{run['experiment']} "
                                f"{run['workload']} on {run['site']}  {attempt}  {end}".rstrip()),
                      markup=False, highlight=False, soft_wrap=True)
        if run["reason"]:
            console.print(printable(f"          reason: {run['reason']}"), markup=False, highlight=False,
                          soft_wrap=True)
        if run["log"]:
            console.print(printable(f"          log: {run['log']}"), markup=False, highlight=False, soft_wrap=True)


def cancel(
    ctx: typer.Context,
    run_ids: Annotated[Optional[list[str]], typer.Argument(help="Run ids (default: every active run "
                                                           "matching the filters).")] = None,
    sweep: SweepOpt = None,
    site: SiteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel runs: active jobs are stopped by their scheduler, unsubmitted runs are dropped."""
    from orchestrator.run.follow import cancel_runs

    c = orch_context(ctx)
    if not (run_ids or sweep or site):
        raise UserError("name run ids, --sweep or --site (cancelling everything needs one of them)")
    done = cancel_runs(c.sessions, c.executors(), sweep=sweep, site=site, run_ids=run_ids or None)
    if as_json:
        print_json([{"run_id": r, "job_id": j or None} for r, j in done])
    else:
        console.print(f"cancelled {len(done)} run(s); `orch status` records the end of their jobs")
