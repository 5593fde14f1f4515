"""`orch plan`: a sweep file to planned runs, each resolved on its site, its script rendered and recorded.

The planning is orchestrator/plan/; this module prints it (a table, a summary past 50 runs, or JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.common import (
    DEFAULT_MAX_RUNS,
    JsonOpt,
    MaxRunsOpt,
    SweepFileArg,
    VariantOpt,
    orch_context,
    site_check,
)
from orchestrator.cli.output import console, err_console, print_json, print_table, sig3, trace_progress
from orchestrator.cli.probe import plan_warnings
from orchestrator.escape import printable

if TYPE_CHECKING:
    from orchestrator.plan.record import PlannedRun


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


def print_lints(plans: list["PlannedRun"], loaded: Any) -> list[dict[str, Any]]:
    """The plan's lints (orchestrator/plan/lints.py) on stderr, one line each; their JSON for --json."""
    from orchestrator.plan.lints import lint_plan

    lints = lint_plan(plans, loaded)
    for lint in lints:
        err_console.print(printable(lint.text()), markup=False, highlight=False, soft_wrap=True)
    return [lint.as_json() for lint in lints]


def plan(
    ctx: typer.Context,
    sweep_file: SweepFileArg,
    show: Annotated[bool, typer.Option("--show", help="Print each rendered batch script.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and resolve; record nothing.")] = False,
    variant: VariantOpt = None,
    max_runs: MaxRunsOpt = DEFAULT_MAX_RUNS,
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

    c = orch_context(ctx)
    loaded = parse_sweep(sweep_file, variant=variant, max_runs=max_runs, check_site=site_check(c))
    with trace_progress():
        plans = plan_sweep(loaded, c.state_dir / "runs", sites_dirs=c.sites_dirs)
    recorded = None if dry_run else record_plan(c.sessions, loaded, plans)
    new = recorded.new if recorded else 0
    columns, rows = _plan_rows(plans)
    warnings = print_lints(plans, loaded)
    warnings += [] if dry_run else plan_warnings(c, plans)  # sites without a passing probe (cli/probe.py)
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


