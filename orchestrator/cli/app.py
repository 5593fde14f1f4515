"""The ``orch`` command line: plan, submit, status, run, sql, sites, workloads, db.

Each command is a thin edge over one stage module. A mistake in the user's input
prints one line (``error: file:line: field: what was expected``) and exits 2.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from orchestrator import __version__, paths
from orchestrator.cli.common import JsonOpt
from orchestrator.cli.output import (
    console,
    err_console,
    print_json,
    print_rows,
    print_table,
    sig3,
    trace_progress,
)
from orchestrator.errors import UserError, did_you_mean
from orchestrator.escape import printable
from orchestrator.states import AttemptState, RunState

if TYPE_CHECKING:
    from sqlalchemy import CursorResult, Engine
    from sqlalchemy.orm import Session, sessionmaker

    from orchestrator.plan.record import PlannedRun
    from orchestrator.run.submit import Executors

# SQLAlchemy, the ORM, the executors and the stage modules are imported by the commands that use
# them: `orch plan --dry-run` never touches the database and `orch status` with nothing in flight
# needs no ORM, so both answer without paying for imports they do not use (SQLAlchemy alone is
# about 0.15 s of start-up).

app = typer.Typer(add_completion=False, rich_markup_mode="rich", pretty_exceptions_enable=False,
                  help="Benchmark campaigns of AI workloads on HPC sites: one sweep file to SQL rows.\n\n"
                       "Quick start: [bold]orch run examples/quickstart.yaml --site local[/bold]")
sites_app = typer.Typer(no_args_is_help=True, help="Site profiles: list, show, check against a twin.")
workloads_app = typer.Typer(no_args_is_help=True, help="Benchmark programs: list and show.")
db_app = typer.Typer(no_args_is_help=True, help="The results database.")
sandbox_app = typer.Typer(no_args_is_help=True, help="A real Slurm cluster on this machine (needs root).")
app.add_typer(sites_app, name="sites")
app.add_typer(workloads_app, name="workloads")
app.add_typer(db_app, name="db")
app.add_typer(sandbox_app, name="sandbox")
# Reading results: reference figures and the glossary (orchestrator/cli/results.py).
from orchestrator.cli.results import glossary as _glossary  # noqa: E402
from orchestrator.cli.results import references_app  # noqa: E402

app.add_typer(references_app, name="references")
app.command("glossary")(_glossary)
# The time model: best layout for a model on N devices (orchestrator/cli/predict.py).
from orchestrator.cli.predict import calibrate as _calibrate  # noqa: E402
from orchestrator.cli.predict import predict as _predict  # noqa: E402

app.command("predict")(_predict)
app.command("calibrate")(_calibrate)
# Following past logout (orchestrator/cli/follow.py).
from orchestrator.cli.follow import follow_app  # noqa: E402

app.add_typer(follow_app, name="follow")
# The site probe: `orch sites probe`, its line in `orch sites show`, its warnings in `orch plan`.
from orchestrator.cli.probe import plan_warnings as _probe_warnings  # noqa: E402
from orchestrator.cli.probe import probe_status as _probe_status  # noqa: E402
from orchestrator.cli.probe import sites_probe as _sites_probe  # noqa: E402


@dataclass
class Context:
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


def ctx_obj(ctx: typer.Context) -> Context:
    return ctx.ensure_object(Context)  # type: ignore[no-any-return]


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


# ---------------------------------------------------------------- plan

DEFAULT_MAX_RUNS = 50_000  # orchestrator.plan.sweep.DEFAULT_MAX_RUNS (not imported: start-up time)

def _plan_rows(plans: list["PlannedRun"]) -> tuple[list[str], list[list[object]]]:
    # mem_gb: predicted per-device peak of tensor memory (orchestrator/predict/memory_trace.py; without the
    # device's fixed cost, which the memory check adds).
    # step_s, run_s: the time model's predicted step and steps-of-the-run seconds (orchestrator/predict/perfmodel/).
    # mem_from: what mem_gb came from: trace (the program on fake tensors), trace+model (DeepSpeed:
    # its traced forward/backward and its documented sharded states and buffers) or formula.
    columns = ["run_id", "experiment", "workload", "site", "devices", "precision", "params", "mem_gb", "mem_from",
               "step_s", "run_s", "nodes", "queue", "tier", "status", "new", "reason"]
    rows: list[list[object]] = []
    for p in plans:
        s, placement = p.spec, p.resolved.placement
        params = dict(s.params)
        for axis in ("strategy", "batch_size", "seq_len"):
            if getattr(s, axis) is not None:
                params[axis] = getattr(s, axis)
        if s.repeat:
            params["repeat"] = s.repeat
        rows.append([s.id, s.experiment, s.workload, s.site + (f":{s.system}" if s.system else ""), s.devices,
                     s.precision, " ".join(f"{k}={v}" for k, v in params.items()),
                     sig3(p.resolved.predicted_peak_gb),
                     p.resolved.memory_from,
                     sig3(p.resolved.predicted_step_s), sig3(p.resolved.predicted_run_s),
                     placement.nodes if placement else None, placement.queue if placement else None,
                     placement.queue_tier if placement else None,
                     p.recorded or p.status, p.new, p.resolved.skip_reason or ""])
    return columns, rows


def _site_check(c: Context) -> Any:
    """Looks a site of the sweep up on the search path (unknown: UserError), for parse_sweep to
    report an unknown site with the sweep's other errors."""
    from orchestrator.sites.profiles import load_site

    return lambda target: load_site(target, c.sites_dirs)


def _print_lints(plans: list["PlannedRun"], loaded: Any) -> list[dict[str, Any]]:
    """The plan's lints (orchestrator/plan/lints.py) on stderr, one line each; their JSON for --json."""
    from orchestrator.plan.lints import lint_plan

    lints = lint_plan(plans, loaded)
    for lint in lints:
        err_console.print(printable(lint.text()), markup=False, highlight=False, soft_wrap=True)
    return [lint.as_json() for lint in lints]


@app.command()
def plan(
    ctx: typer.Context,
    sweep_file: Annotated[Path, typer.Argument(help="The sweep YAML file.")],
    show: Annotated[bool, typer.Option("--show", help="Print each rendered batch script.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and resolve; record nothing.")] = False,
    variant: Annotated[Optional[str], typer.Option("--variant", help="Apply the sweep's named variant "
                                                   "(e.g. tiny) first.")] = None,
    max_runs: Annotated[int, typer.Option("--max-runs", help="Refuse a sweep that expands to more runs "
                                          "than this.")] = DEFAULT_MAX_RUNS,
    all_runs: Annotated[bool, typer.Option("--all", help="List every run (a plan of more than 50 runs "
                                           "prints a summary), in a pager on a terminal.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column (memory source, nodes, queue, tier, new, "
                                       "reason) instead of one line per run.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Expand a sweep into runs, resolve each on its site, render its script and record it.

    Runs a site cannot do are kept as [bold]skipped[/bold] with the reason. Re-planning reconciles: \
every run not yet submitted (planned, skipped, or cancelled before submission) takes its new plan when \
anything that feeds it changed (sweep values, the site profile, an environment variable such as the \
account, templates, orch's version): its status, skip reason, predictions and job.sh are rewritten, and \
the plan says what changed ("3 scripts re-rendered, 12 skipped -> planned"). Submitted and finished runs \
are never touched; planning twice with nothing changed changes nothing. A plan of more than 50 runs prints \
a summary (runs by site, skip reasons, the first rows); \
--all, --json and --show print every run.

    Each run shows its predicted memory per device (mem_gb; a run that will not fit is skipped with \
predicted and available GB) and what it came from (mem_from: trace, trace+model for DeepSpeed, or formula \
where tracing cannot go, e.g. pipeline stages), step and run time (step_s, run_s), and the plan the \
campaign's node-hours and cost. gpt2's memory is traced from its own training step on fake tensors: a new \
shape costs up to a second or two once (and each tracing process a few seconds to import torch), then \
comes from ~/.cache/orch/memory ($ORCH_MEMORY_CACHE). The examples' shapes ship traced \
(orchestrator/predict/pretraced.json, for this torch version): their first plan traces nothing. New \
shapes are traced side by side in $ORCH_TRACE_WORKERS processes (default: one per core); \
ORCH_MEMORY_TRACE=0 uses the formulas instead.
    """
    from orchestrator.cli.plansummary import SUMMARY_ABOVE, listing, summary
    from orchestrator.plan.record import plan_sweep, record_plan
    from orchestrator.plan.sweep import parse_sweep

    c = ctx_obj(ctx)
    loaded = parse_sweep(sweep_file, variant=variant, max_runs=max_runs, check_site=_site_check(c))
    with trace_progress():
        plans = plan_sweep(loaded, c.state_dir / "runs", sites_dirs=c.sites_dirs)
    recorded = None if dry_run else record_plan(c.sessions, loaded, plans)
    new = recorded.new if recorded else 0
    columns, rows = _plan_rows(plans)
    warnings = _print_lints(plans, loaded)
    warnings += [] if dry_run else _probe_warnings(c, plans)  # sites without a passing probe (cli/probe.py)
    if as_json:
        from orchestrator.plan.cost import campaign_cost

        print_json({"sweep": loaded.sweep.name, "new": new, "runs": [dict(zip(columns, r)) for r in rows],
                    "warnings": warnings,
                    "changed": recorded.changes if recorded else {}, "kept": recorded.kept if recorded else {},
                    "predicted": campaign_cost(plans).as_json(),
                    **({"scripts": {p.spec.id: p.script for p in plans}} if show else {})})
        return
    if all_runs and not show:
        import pydoc

        pydoc.pager("\n".join([f"sweep {loaded.sweep.name}", *listing(columns, rows), ""]))  # plain text when piped
    elif len(plans) > SUMMARY_ABOVE and not show:
        console.print(f"sweep {loaded.sweep.name}", markup=False, highlight=False)
        for line in summary(plans, columns, rows):
            console.print(printable(line), markup=False, highlight=False, overflow="ellipsis", no_wrap=True, crop=True)
    elif wide:
        print_table(columns, rows, title=f"sweep {loaded.sweep.name}")
    else:
        from orchestrator.cli.plantable import print_plan_table

        print_plan_table(plans, f"sweep {loaded.sweep.name}")
    if show:
        for p in plans:
            if p.script:
                console.rule(printable(f"{p.spec.id}  {p.files.script}"))
                # Never folded: a script copied from here must run as written (soft_wrap).
                console.print(printable(p.script), markup=False, highlight=False, soft_wrap=True)
    from orchestrator.plan.cost import campaign_cost

    for line in campaign_cost(plans).lines():
        console.print(line, markup=False, highlight=False)
    skipped = sum(1 for p in plans if p.resolved.skipped)
    verb = "would plan" if dry_run else "planned"
    console.print(f"{len(plans)} runs: {len(plans) - skipped} runnable, {skipped} skipped; "
                  f"{verb} {new if not dry_run else sum(p.new for p in plans)} new.")
    for line in recorded.lines() if recorded else []:
        console.print(printable(f"re-planned: {line}"), markup=False, highlight=False)


# ---------------------------------------------------------------- submit / status / run

@app.command()
def submit(
    ctx: typer.Context,
    site: Annotated[Optional[str], typer.Option("--site", help="Only runs on this site.")] = None,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Only runs of this sweep (its name).")] = None,
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

    c = ctx_obj(ctx)
    if (site or sweep) and not state_counts(c.engine, sweep, site):
        what = " and ".join(f"{k} {v}" for k, v in (("sweep", sweep), ("site", site)) if v)
        raise UserError(f"no runs of {what} in {redact(c.db_url)} (plan a sweep that names it first: "
                        "orch plan SWEEP)")
    report = submit_runs(c.sessions, c.executors(), site=site, sweep=sweep, dry_run=dry_run)
    # A run held back because the server could not be reached was not submitted (it cannot have
    # reached the scheduler): a submit where that is all that happened fails, for PBS and Slurm alike.
    reached = [d for d in report.deferred if d not in report.unreached]
    nothing = not (dry_run or report.submitted or report.failed or reached)
    why_nothing = ""
    if nothing:
        why_nothing = (_why_unreached(report.unreached) if report.unreached else _why_nothing(c, sweep, site))
    if as_json:
        print_json({"submitted": [{"run_id": r, "job_id": j} for r, j in report.submitted],
                    "failed": [{"run_id": r, "reason": why} for r, why in report.failed],
                    "deferred": [{"run_id": r, "reason": why} for r, why in report.deferred],
                    "unreached": [{"run_id": r, "reason": why} for r, why in report.unreached],
                    "would_submit": report.would_submit, "scheduler_calls": report.calls,
                    **({"nothing_submitted": why_nothing} if nothing else {})})
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
        err_console.print(f"{head}{scope}: {why_nothing}", markup=False, soft_wrap=True)
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


def _why_nothing(c: Context, sweep: str | None, site: str | None) -> str:
    """Why no run was handed to a scheduler: where the runs in scope are, and the commonest skip reasons."""
    from sqlalchemy import func, select

    from orchestrator.results.db.models import Run
    from orchestrator.results.db.state import state_counts

    counts = state_counts(c.engine, sweep, site)
    if not counts:
        return "the database holds no runs (plan a sweep first: orch plan SWEEP)"
    where = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    text = f"no run is planned or waiting for a retry ({where})"
    if counts.get(RunState.SKIPPED):
        with c.sessions() as session:
            query = select(Run.skip_reason, func.count()).where(Run.status == RunState.SKIPPED)
            for column, value in ((Run.sweep, sweep), (Run.site, site)):
                if value:
                    query = query.where(column == value)
            reasons = session.execute(query.group_by(Run.skip_reason).order_by(func.count().desc()).limit(3)).all()
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


def _follow(c: Context, executors: "Executors", sweep: str | None, site: str | None, interval: float,
            watch: bool, quiet: bool = False, submit_planned: bool = False) -> tuple[int, dict[str, int]]:
    """Poll until nothing is active (watch) or once; returns the number of polls and the runs per
    state after the last one. Runs waiting for a retry are resubmitted; with ``submit_planned``
    (``orch run``) so are planned runs a queue limit held back."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator.results.db.state import state_counts
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
            submit_runs(c.sessions, executors, site=site, sweep=sweep,
                        run_ids=None if submit_planned else _retry_ids(c, sweep, site))
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


def _retry_ids(c: Context, sweep: str | None, site: str | None) -> list[str]:
    from sqlalchemy import select

    from orchestrator.results.db.models import Run

    with c.sessions() as session:
        query = select(Run.id).where(Run.status == RunState.RETRY)
        if sweep:
            query = query.where(Run.sweep == sweep)
        if site:
            query = query.where(Run.site == site)
        return list(session.scalars(query))


MAX_INTERVAL_S = 86_400  # orchestrator.cli.follow.MAX_INTERVAL_S (not imported: start-up time)


def _check_interval(interval: float) -> None:
    """Seconds between polls: a negative one made time.sleep() raise, nan and inf one a traceback
    or a poll that never comes."""
    if not 0 < interval <= MAX_INTERVAL_S:  # nan compares False with everything
        raise UserError(f"--interval {interval}: expected seconds between polls, more than 0 and at most "
                        f"{MAX_INTERVAL_S:,} (a day)")


@app.command()
def status(
    ctx: typer.Context,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Only this sweep.")] = None,
    site: Annotated[Optional[str], typer.Option("--site", help="Only this site.")] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Keep following until no run is active.")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between polls with --watch.")] = 5.0,
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

    _check_interval(interval)
    c = ctx_obj(ctx)
    if _no_database_here(c):
        if as_json:
            print_json({"counts": {}, "total": 0, "polls": 0, "scheduler_calls": {}, "database": None,
                        **({"runs": []} if failed or running or skipped else {})})
        return
    if needs_follow(c.engine, sweep, site):
        executors = c.executors()
        polls, counts = _follow(c, executors, sweep, site, interval, watch, quiet=as_json)
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


def _missing_database(c: Context) -> str | None:
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


def _no_database_here(c: Context) -> bool:
    """Whether :func:`_missing_database` has a hint: printed on stderr (`orch status` then reports nothing)."""
    hint = _missing_database(c)
    if hint is not None:
        err_console.print(hint, markup=False, soft_wrap=True)
    return hint is not None


def _require_database(c: Context) -> None:
    """A read command (sql, export, report) where no database is: the hint as its error (exit 2),
    nothing created."""
    hint = _missing_database(c)
    if hint is not None:
        raise UserError(hint)


@app.command()
def cancel(
    ctx: typer.Context,
    run_ids: Annotated[Optional[list[str]], typer.Argument(help="Run ids (default: every active run "
                                                           "matching the filters).")] = None,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Only this sweep.")] = None,
    site: Annotated[Optional[str], typer.Option("--site", help="Only this site.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel runs: active jobs are stopped by their scheduler, unsubmitted runs are dropped."""
    from orchestrator.run.follow import cancel_runs

    c = ctx_obj(ctx)
    if not (run_ids or sweep or site):
        raise UserError("name run ids, --sweep or --site (cancelling everything needs one of them)")
    done = cancel_runs(c.sessions, c.executors(), sweep=sweep, site=site, run_ids=run_ids or None)
    if as_json:
        print_json([{"run_id": r, "job_id": j or None} for r, j in done])
    else:
        console.print(f"cancelled {len(done)} run(s); `orch status` records the end of their jobs")


def _stop_on_interrupt(c: Context, executors: "Executors", sweep: str, site: str | None, sweep_file: Path) -> None:
    """A Ctrl-C of `orch run`: the jobs it started on this machine stop and their runs are planned
    again (running the same command resumes); jobs on a scheduler stay queued, as batch jobs do."""
    from sqlalchemy import func, select

    from orchestrator.results.db.models import Run
    from orchestrator.run.follow import stop_local

    err_console.print("interrupted: stopping this sweep's local jobs (Ctrl-C again leaves them running)",
                      markup=False)
    stopped, lingering = stop_local(c.sessions, executors, sweep, site)
    with c.sessions() as session:
        query = select(func.count()).select_from(Run).where(
            Run.sweep == sweep, Run.status.in_((RunState.SUBMITTING, RunState.SUBMITTED, RunState.RUNNING)))
        elsewhere = session.scalar(query.where(Run.site == site) if site else query) or 0
    if stopped:
        err_console.print(f"stopped {len(stopped)} local job(s); their runs are planned again", markup=False)
    if lingering:
        err_console.print(f"{len(lingering)} local job(s) had not exited yet (controller pids {', '.join(lingering)})",
                          markup=False)
    if elsewhere:
        err_console.print(f"{elsewhere} run(s) stay with their scheduler; `orch status` follows them, "
                          f"`orch cancel --sweep {sweep}` stops them", markup=False, soft_wrap=True)
    err_console.print(f"resume with: orch run {shlex.quote(str(sweep_file))}", markup=False, soft_wrap=True)


def _check_sweep_names_site(sweep: object, site: str, sweep_file: Path) -> None:
    """``orch run SWEEP --site S`` runs the sweep's runs on S: a site the sweep does not name is a
    mistake (running the sweep elsewhere would be a different sweep), refused before anything is
    recorded."""
    named = sorted({target for exp in sweep.experiments for target in exp.sites})  # type: ignore[attr-defined]
    if site not in named and site not in {t.partition(":")[0] for t in named}:
        raise UserError(f"{sweep_file}: --site {site}: the sweep does not name this site (its sites: "
                        f"{', '.join(named)}); edit its sites: or use a --variant that names {site}")


SUMMARY_COLUMNS = ["run_id", "experiment", "workload", "site", "devices", "precision", "strategy", "params", "status",
                   "failure_class", "tflops", "tokens_per_s", "step_time_s", "peak_mem_gb"]


@app.command()
def run(
    ctx: typer.Context,
    sweep_file: Annotated[Path, typer.Argument(help="The sweep YAML file.")],
    site: Annotated[Optional[str], typer.Option("--site", help="Only runs on this site.")] = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between polls.")] = 2.0,
    variant: Annotated[Optional[str], typer.Option("--variant", help="Apply the sweep's named variant "
                                                   "(e.g. tiny) first.")] = None,
    max_runs: Annotated[int, typer.Option("--max-runs", help="Refuse a sweep that expands to more runs "
                                          "than this.")] = DEFAULT_MAX_RUNS,
    as_json: JsonOpt = False,
) -> None:
    """Plan, submit and follow a sweep to the end, then print its results.

    With [bold]--site S[/bold] only the sweep's runs on S are submitted; a site the sweep does not
    name is refused (exit 2), and exit 1 when every run on it is skipped."""
    _check_interval(interval)  # before anything is planned or submitted
    from orchestrator.run import interrupt

    c = ctx_obj(ctx)
    with interrupt.watching():
        _run_sweep(c, sweep_file, site, interval, variant, max_runs, as_json)


def _run_sweep(c: Context, sweep_file: Path, site: str | None, interval: float, variant: str | None,
               max_runs: int, as_json: bool) -> None:
    """`orch run` under a Ctrl-C that is never lost (see orchestrator/run/interrupt.py)."""
    from sqlalchemy import text

    from orchestrator.plan.record import plan_sweep, record_plan
    from orchestrator.plan.sweep import parse_sweep
    from orchestrator.results.db.engine import redact
    from orchestrator.run import interrupt
    from orchestrator.run.submit import submit_runs

    loaded = parse_sweep(sweep_file, variant=variant, max_runs=max_runs, check_site=_site_check(c))
    if site is not None:
        _check_sweep_names_site(loaded.sweep, site, sweep_file)
    with trace_progress():
        plans = plan_sweep(loaded, c.state_dir / "runs", sites_dirs=c.sites_dirs)
    interrupt.check()
    _print_lints(plans, loaded)
    recorded = record_plan(c.sessions, loaded, plans)
    interrupt.check()
    new = recorded.new
    name = loaded.sweep.name
    mine = [p for p in plans if site is None or p.spec.site == site]
    if not any(not p.resolved.skipped for p in mine):
        reasons = sorted({p.resolved.skip_reason or "" for p in mine})
        err_console.print(f"error: sweep {name}: nothing to run{f' on {site}' if site else ''}: every one of its "
                          f"{len(mine)} run(s) is skipped ({'; '.join(reasons[:3])})", markup=False, soft_wrap=True)
        raise typer.Exit(1)
    if not as_json:
        skipped = sum(1 for p in plans if p.resolved.skipped)
        err_console.print(f"sweep {name}: {len(plans)} runs ({skipped} skipped), {new} new; db {redact(c.db_url)}")
        for line in recorded.lines():
            err_console.print(f"re-planned: {line}", markup=False, soft_wrap=True)
    executors = c.executors()
    try:
        report = submit_runs(c.sessions, executors, site=site, sweep=name)
        for run_id, why in report.failed:
            err_console.print(f"  refused {run_id}: {why}", markup=False, soft_wrap=True)
        _follow(c, executors, name, site, interval, watch=True, quiet=as_json, submit_planned=True)
    except KeyboardInterrupt:
        _stop_on_interrupt(c, executors, name, site, sweep_file)
        raise
    with c.sessions() as session:
        sql = ("SELECT run_id, experiment, workload, site, devices, precision, strategy, params, status, "
               "failure_class, "
               "tflops, tokens_per_s, step_time_s, peak_mem_gb FROM results r WHERE sweep = :sweep "
               "AND attempt = (SELECT MAX(attempt) FROM results r2 WHERE r2.run_id = r.run_id)"
               + (" AND site = :site" if site else "") + " ORDER BY experiment, workload, devices, precision, run_id")
        rows = [list(r) for r in session.execute(text(sql), {"sweep": name, "site": site})]
    if not as_json:  # params as compact k=v for people (harness settings left out); JSON keeps all
        for row in rows:
            row[7] = " ".join(f"{k}={v}" for k, v in json.loads(row[7] or "{}").items()
                              if k not in ("warmup", "iters"))
    if not rows:  # every runnable run was dropped or handed back before it ran
        err_console.print(f"error: sweep {name}: nothing ran: {_why_nothing(c, name, site)}", markup=False,
                          soft_wrap=True)
        raise typer.Exit(1)
    columns = list(SUMMARY_COLUMNS)
    notes = _percentile_notes(c, name, rows)
    if notes:  # a p99 from a handful of iterations is said beside it (issue 27)
        columns.append("note")
        rows = [row + [notes.get(row[0])] for row in rows]
    print_rows(columns, rows, "json" if as_json else "table", title=f"results of {name}")
    if any(r[8] != AttemptState.COMPLETED for r in rows):  # status: the last attempt's
        raise typer.Exit(1)


def _percentile_notes(c: Context, sweep: str, rows: list[list[Any]]) -> dict[str, str]:
    """The inference view's p99_note of each llm_inference run of ``rows`` that has one, by run id
    (the view is read only when such a run is there: it pivots every metric value)."""
    from sqlalchemy import text

    if not any(row[2] == "llm_inference" for row in rows):
        return {}
    with c.sessions() as session:
        found = session.execute(text("SELECT run_id, attempt, p99_note FROM inference WHERE sweep = :sweep "
                                     "AND p99_note IS NOT NULL ORDER BY attempt"), {"sweep": sweep})
        return {run_id: note for run_id, _, note in found}  # the last attempt's


# ---------------------------------------------------------------- sql

# A query file is a page of SQL; anything far larger is not one.
SQL_FILE_LIMIT = 16 * 1024 * 1024
# Rows `orch sql` reads unless told otherwise: far more than a person reads, few enough to hold.
SQL_MAX_ROWS = 100_000


@app.command()
def sql(
    ctx: typer.Context,
    query: Annotated[Optional[str], typer.Argument(help='SQL to run, e.g. "SELECT * FROM results".')] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    file: Annotated[Optional[Path], typer.Option("--file", help="Read the query from this file "
                                                 "(e.g. db/queries/scaling_efficiency.sql).")] = None,
    write: Annotated[bool, typer.Option("--write", help="Allow statements that change the database "
                                        "(INSERT, UPDATE, DELETE, DROP, ...).")] = False,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Print at most this many rows (0: no limit); "
                                          "stderr says when more were left out.")] = SQL_MAX_ROWS,
) -> None:
    """Run a SQL query on the results database (the [bold]results[/bold] view is the public surface).

    Read-only unless [bold]--write[/bold]: the database itself refuses any change (a read-only
    transaction) and, on SQLite, ATTACH (which would create a file). A reader never waits for
    another orch process's write. At most [bold]--max-rows[/bold] rows are read (100,000 unless
    given), so a runaway query cannot fill the memory."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from orchestrator.results.db.engine import (
        ATTACH_REFUSED,
        is_read_only_refusal,
        is_several_statements,
        open_engine,
        session_factory,
    )

    if fmt not in ("table", "csv", "json"):
        raise UserError(f"--format: expected table, csv or json, got {fmt!r}")
    if max_rows < 0:
        raise UserError(f"--max-rows: expected 0 (no limit) or a positive count, got {max_rows}")
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
    c = ctx_obj(ctx)
    _require_database(c)
    engine = c.engine if write else open_engine(c.db_url, read_only=True)
    with session_factory(engine)() as session:
        try:
            # A statement's result is a CursorResult (returns_rows, rowcount), whatever the statement.
            result: CursorResult[Any] = session.execute(text(query))  # type: ignore[assignment]
        except DBAPIError as exc:
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
            console.print(f"ok ({result.rowcount} row(s) affected)")
            return
        columns = list(result.keys())
        rows = [list(r) for r in (result.fetchmany(max_rows + 1) if max_rows else result)]
    if max_rows and len(rows) > max_rows:
        rows = rows[:max_rows]
        err_console.print(f"note: only the first {max_rows} rows are shown; the query returned more "
                          "(add LIMIT/OFFSET, or --max-rows 0 for all)", markup=False, soft_wrap=True)
    print_rows(columns, rows, fmt)


# Every view (orchestrator/results/db/views.py) and the two tables a person reads.
EXPORTABLE = ("results", "throughput", "repeat_spread", "scaling", "cost", "provenance", "inference",
              "prediction_error", "reference_check", "runs", "attempts")


@app.command()
def export(
    ctx: typer.Context,
    fmt: Annotated[str, typer.Option("--format", "-f", help="csv, json or parquet.")] = "csv",
    view: Annotated[str, typer.Option("--view", help="What to export: " + ", ".join(EXPORTABLE) + ".")] = "results",
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Only rows of this sweep.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout; "
                                                   "required for parquet).")] = None,
) -> None:
    """Export a view (default [bold]results[/bold]) as CSV, JSON or Parquet."""
    from sqlalchemy import text

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
    c = ctx_obj(ctx)
    _require_database(c)
    # attempts has no sweep column: its runs' sweep decides.
    by_sweep = " WHERE run_id IN (SELECT id FROM runs WHERE sweep = :sweep)" if view == "attempts" \
        else " WHERE sweep = :sweep"
    query = f"SELECT * FROM {view}" + (by_sweep if sweep else "")
    with c.sessions() as session:
        result = session.execute(text(query), {"sweep": sweep} if sweep else {})
        columns = list(result.keys())
        rows = [list(r) for r in result]
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


@app.command()
def report(
    ctx: typer.Context,
    output: Annotated[str, typer.Option("--output", "-o", help="report.html (one self-contained page), or DIR/ "
                                        "(DIR/index.html and DIR/figures/*.svg, *.png).")],
    sweep: Annotated[Optional[list[str]], typer.Option("--sweep", help="Only this sweep (repeatable).")] = None,
) -> None:
    """The studies' figures from the database: one HTML page that works offline, every mark linked to its run."""
    from orchestrator.results.db.engine import redact
    from orchestrator.results.report import build_report

    c = ctx_obj(ctx)
    _require_database(c)
    directory = output.endswith(("/", os.sep)) or Path(output).is_dir()
    done = build_report(c.engine, Path(output), directory, sweep or [], redact(c.db_url))
    err_console.print(f"wrote {done.page}: {len(done.drawn)} figure(s) ({', '.join(done.drawn) or 'none'}), "
                      f"{done.runs} run(s) in provenance"
                      + (f", {len(done.files)} figure file(s)" if done.files else ""))
    for skip in done.skipped:
        err_console.print(f"  not drawn: {skip.title}: {skip.reason}", markup=False, highlight=False)


# ---------------------------------------------------------------- sites / workloads / db

@sites_app.command("list")
def sites_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every site profile on the search path."""
    from orchestrator.sites.profiles import available_sites, find_site_file, load_site

    c = ctx_obj(ctx)
    rows = []
    broken: list[UserError] = []
    for name in available_sites(c.sites_dirs):
        try:
            profile = load_site(name, c.sites_dirs)
        except UserError as exc:  # one bad profile in --sites-dir is its own error, not every site's
            broken.append(exc)
            continue
        rows.append([name, profile.scheduler, profile.device.model, profile.device.per_node, profile.max_nodes,
                     ", ".join(q.label for q in profile.queues), ", ".join(profile.systems),
                     str(find_site_file(name, c.sites_dirs))])
    columns = ["site", "scheduler", "device", "devices_per_node", "max_nodes", "queues", "systems", "file"]
    print_rows(columns, rows, "json" if as_json else "table")
    for problem in broken:
        err_console.print(printable(f"error: {problem}"), markup=False, highlight=False, soft_wrap=True)
    if broken:
        raise typer.Exit(2)


@sites_app.command("show")
def sites_show(ctx: typer.Context, site: Annotated[str, typer.Argument(help="site or site:system")],
               as_json: JsonOpt = False) -> None:
    """One site's profile, validated, and the latest probe of this version of it (`orch sites probe`;
    JSON: "probe", null when none).

    The profile is printed as its file is written, with the comments that cite each fact's source;
    with [bold]site:system[/bold] (or [bold]--json[/bold]) the values as they apply, the system's
    overrides merged in."""
    from orchestrator.sites.profiles import load_site

    profile = load_site(site, ctx_obj(ctx).sites_dirs)
    data = profile.model_dump(mode="json")
    probe, probe_line = _probe_status(ctx_obj(ctx), site)
    if as_json:
        print_json({**data, "probe": probe})
        return
    source = profile.source
    if ":" not in site and source is not None:  # the file as written: its sources are its comments
        from orchestrator.yamlsource import read_source

        console.print(printable(f"# {source.path}"), markup=False, highlight=False, soft_wrap=True)
        console.print(printable(read_source(source.path).rstrip("\n")), markup=False, highlight=False,
                      soft_wrap=True)
    else:
        import yaml

        where = f" (the file, with each value's source: {source.path})" if source is not None else ""
        console.print(printable(f"# {site}: the values as they apply{where}"), markup=False, highlight=False,
                      soft_wrap=True)
        console.print(printable(yaml.safe_dump(data, sort_keys=False)), markup=False, highlight=False, soft_wrap=True)
    console.print(probe_line, markup=False, highlight=False, soft_wrap=True)


@sites_app.command("check")
def sites_check(
    ctx: typer.Context,
    site: Annotated[str, typer.Argument(help="site (every Slurm system of it) or site:system")],
    no_up: Annotated[bool, typer.Option(
        "--no-up", help="Do not bring the twin up; fail unless the sandbox already is this site's twin.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Validate the site's representative scripts with [bold]sbatch --test-only[/bold] on its twin.

    Renders 1 device, 1 node, 2 nodes and the largest queue at its limits through the normal plan
    path, and has the sandbox, configured as the site's twin, judge each script. The twin is brought
    up as by [bold]orch sandbox up --like SITE[/bold] (root; idempotent) and stays up afterwards;
    [bold]orch sandbox up[/bold] restores the plain sandbox. Exit 1 when any script is rejected,
    2 when the site has no Slurm system (PBS: emulator only; appliances).
    """
    import os

    from orchestrator.run.sitecheck import check_site

    c = ctx_obj(ctx)
    report = check_site(site, os.environ, c.sites_dirs, bring_up=not no_up,
                        workdir=c.state_dir / "sitecheck" / site.replace(":", "+"))
    if as_json:
        print_json(report.as_dict())
    else:
        rows = [[r.target, r.shape, r.devices, r.nodes, r.queue, r.result,
                 r.detail + "".join(f" [{n}]" for n in r.notes)] for r in report.rows]
        print_table(["target", "shape", "devices", "nodes", "queue", "result", "detail"], rows,
                    title=f"{site} against " + (f"its twin (sandbox up --like {report.twin})" if report.twin
                                                else "no twin"))
        for note in report.twin_notes:
            console.print(f"twin: {note}", markup=False, highlight=False)
        if report.workdir:
            console.print(f"scripts checked: {report.workdir}", markup=False, highlight=False)
        checked, rejected = len(report.checked), len(report.rejected)
        console.print(f"{checked - rejected} of {checked} script(s) accepted" if checked else
                      "nothing could be checked here")
    if report.exit_code:
        raise typer.Exit(report.exit_code)


@sites_app.command("rehearsal")
def sites_rehearsal(
    ctx: typer.Context,
    site: Annotated[str, typer.Argument(help="site (its Slurm systems are kept; a PBS site runs through a PBS "
                                              "server here or orch's PBS emulator)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory to write <site>.yaml into.")],
    as_json: JsonOpt = False,
) -> None:
    """Write a copy of SITE's profile for a rehearsal on its twin: the site's directives, this machine's CPU.

    Then: [bold]orch sandbox up --like SITE[/bold] and [bold]orch --sites-dir OUTPUT run SWEEP[/bold].
    A PBS site (no twin): [bold]source OUTPUT/pbs-env.sh[/bold] (the emulator, when no PBS server is here),
    then the same run; the command says what that proves and what it does not.
    """
    from orchestrator.run.sitecheck import pbs_rehearsal_setup, rehearsal_profile, with_pbs_commands_dir

    filename, text, changes = rehearsal_profile(site, ctx_obj(ctx).sites_dirs)
    output.mkdir(parents=True, exist_ok=True)
    path = output / filename
    notes: list[str] = []
    if "\nscheduler: pbs\n" in text:
        # PBS: no twin; the emulator, named by absolute path in the profile (and what that proves, plainly).
        notes, commands_dir = pbs_rehearsal_setup(output)
        if commands_dir is not None:
            text = with_pbs_commands_dir(text, commands_dir)
    path.write_text(text)
    if as_json:
        print_json({"path": str(path), "changes": changes, "notes": notes})
        return
    console.print(f"wrote {path}", markup=False, highlight=False)
    for change in changes:
        console.print(f"  {change}", markup=False, highlight=False)
    for note in notes:
        console.print(note, markup=False, highlight=False)


sites_app.command("probe")(_sites_probe)  # orchestrator/cli/probe.py


@workloads_app.command("list")
def workloads_list(as_json: JsonOpt = False) -> None:
    """Every workload orch can run."""
    from workloads.registry import WORKLOADS

    rows = [[w.name, w.module, ", ".join(sorted(w.axes)), ", ".join(w.strategies), w.distributed, w.summary]
            for w in WORKLOADS.values()]
    print_rows(["workload", "module", "axes", "strategies", "distributed", "summary"], rows,
               "json" if as_json else "table")


@workloads_app.command("show")
def workloads_show(name: Annotated[str, typer.Argument(help="The workload (orch workloads list).")],
                   as_json: JsonOpt = False) -> None:
    """A workload's parameters, defaults and help."""
    from workloads import registry

    try:
        workload = registry.get(name)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    rows = [[p.name, p.type.__name__, p.default, ", ".join(map(str, p.choices or ())), p.help] for p in workload.params]
    presets = workload.presets() if workload.presets else []
    if as_json:
        print_json({"name": workload.name, "module": workload.module, "summary": workload.summary,
                    "axes": sorted(workload.axes), "strategies": list(workload.strategies),
                    "precisions": list(workload.precisions),
                    "params": [dict(zip(["name", "type", "default", "choices", "help"], r)) for r in rows],
                    "presets": presets})
        return
    console.print(f"[bold]{workload.name}[/bold] ({workload.module}): {workload.summary}")
    print_table(["param", "type", "default", "choices", "help"], rows)
    if presets:  # model sizes: columns are the rows' keys, counts in millions/billions
        from workloads.models.configs import human

        keys = list(presets[0])
        print_table(keys, [[human(v) if k.startswith("params") else v for k, v in r.items()] for r in presets])


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply the database migrations (safe to repeat)."""
    from orchestrator.results.db.engine import current_revision, make_engine, redact, upgrade

    c = ctx_obj(ctx)
    engine = make_engine(c.db_url)
    try:
        before = current_revision(engine)
        upgrade(engine)  # one transaction: a migration that fails leaves the database as it was
        # A view dropped by hand (`orch sql --write "DROP VIEW results"`) comes back: the views
        # are re-created from the newest migration's SQL when any is missing.
        from orchestrator.results.db.views import missing_views, recreate_views

        with engine.begin() as connection:
            restored = recreate_views(connection) if missing_views(connection) else []
    except Exception as exc:  # connection refused, a schema edited by hand, ...
        raise UserError(f"cannot upgrade {redact(c.db_url)}: {str(exc).splitlines()[0]}") from None
    console.print(f"{redact(c.db_url)}: {before or 'empty'} -> {current_revision(engine)}"
                  + (f"; views re-created: {', '.join(restored)}" if restored else ""))


@db_app.command("rebuild-results")
def db_rebuild_results(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Write the [bold]results[/bold] rows again from runs, attempts and metrics (safe to repeat).

    For a results table emptied or edited by hand; one transaction, so an interrupted rebuild
    changes nothing."""
    from rich.progress import Progress

    from orchestrator.results.db.rebuild import rebuild_results

    c = ctx_obj(ctx)
    with Progress(console=err_console, disable=as_json, transient=True) as bar:
        task = bar.add_task("result rows", total=None)
        count = rebuild_results(c.sessions, lambda done, total: bar.update(task, completed=done, total=total))
    if as_json:
        print_json({"attempts": count})
    else:
        console.print(f"results rebuilt: {count} row(s) from the ended attempts")


@db_app.command("url")
def db_url(ctx: typer.Context) -> None:
    """The database orch would use here (password hidden)."""
    from orchestrator.results.db.engine import redact

    console.print(redact(ctx_obj(ctx).db_url))


# ---------------------------------------------------------------- sandbox

@sandbox_app.command("up")
def sandbox_up(
    ctx: typer.Context,
    like: Annotated[Optional[str], typer.Option(
        "--like", help="Configure as a twin of this site: its partitions and limits, gres, node sizes, accounts "
                       "and QoS (from the environment variables its profile names), with enforcement on.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Switch to a twin even while jobs are queued or running.")]
    = False,
    as_json: JsonOpt = False,
) -> None:
    """Bring up (idempotently) a Slurm cluster here: slurmctld, 4 slurmd nodes with gres gpu:4, slurmdbd.

    With [bold]--like SITE[/bold] the same cluster becomes a twin of SITE (every Slurm system of it);
    without it the plain sandbox (partitions debug and batch, no enforcement) is restored.
    """
    import os

    from orchestrator.sites import sandbox

    _print_sandbox(sandbox.up(like=like, env=os.environ, force=force, sites_dirs=ctx_obj(ctx).sites_dirs), as_json)


@sandbox_app.command("down")
def sandbox_down() -> None:
    """Stop the sandbox cluster's daemons."""
    from orchestrator.sites import sandbox

    sandbox.down()
    console.print("sandbox stopped")


@sandbox_app.command("status")
def sandbox_status(as_json: JsonOpt = False) -> None:
    """What of the sandbox cluster is running, and which site it is a twin of (twin; none: plain)."""
    from orchestrator.sites import sandbox

    _print_sandbox(sandbox.status(), as_json)


def _print_sandbox(state: object, as_json: bool) -> None:
    from dataclasses import asdict, is_dataclass

    data = asdict(state) if is_dataclass(state) and not isinstance(state, type) else {"status": str(state)}
    data.pop("expected_nodes", None)
    if as_json:
        print_json(data)
    else:
        if "twin" in data and not data["twin"]:
            data["twin"] = "none (the plain sandbox)"
        print_table(["what", "state"], [[k, json.dumps(v, default=str) if isinstance(v, (list, dict)) else v]
                                        for k, v in data.items()])


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
