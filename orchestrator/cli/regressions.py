"""`orch again` (a finished sweep's next epoch) and `orch regressions` (change points per series,
with what changed beside each). The work is in orchestrator/run/epoch.py and
orchestrator/results/regressions/; this module reads options and prints."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from orchestrator.cli.common import JsonOpt, SweepOpt, orch_context
from orchestrator.cli.output import console, err_console, print_json, print_table


class FailOn(str, Enum):
    regression = "regression"
    change = "change"
    never = "never"


def again(
    ctx: typer.Context,
    sweep: Annotated[str, typer.Argument(help="The sweep (its name) to repeat.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what the next epoch would run; change nothing.")]
    = False,
    as_json: JsonOpt = False,
) -> None:
    """Repeat a finished sweep as its next epoch and submit it: every run again, re-rendered from its
    recorded spec and its site's profile as it is now, each with a new attempt and result row.

    Refused while any run of the sweep has not ended. Follow it with [bold]orch status --sweep S
    --watch[/bold]; [bold]orch regressions[/bold] reads the epochs (docs/regressions.md has a
    nightly cron/scrontab recipe)."""
    from orchestrator.run.epoch import start_epoch
    from orchestrator.run.submit import submit_runs

    c = orch_context(ctx)
    report = start_epoch(c.sessions, sweep, c.sites_dirs, dry_run=dry_run)
    submitted = [] if dry_run else submit_runs(c.sessions, c.executors(), sweep=sweep).submitted
    if as_json:
        print_json({"sweep": sweep, "epoch": report.epoch, "dry_run": dry_run, "planned": report.planned,
                    "skipped": [{"run_id": r, "reason": why} for r, why in report.skipped],
                    "rerendered": report.rerendered, "submitted": [{"run_id": r, "job_id": j} for r, j in submitted]})
        return
    verb = "would run" if dry_run else f"submitted {len(submitted)} of"
    err_console.print(f"sweep {sweep}: epoch {report.epoch} {verb} {len(report.planned)} run(s), "
                      f"{report.rerendered} with a script that changed since the last epoch, "
                      f"{len(report.skipped)} skipped", markup=False, highlight=False)
    for run_id, why in report.skipped:
        err_console.print(f"  skipped {run_id}: {why}", markup=False, soft_wrap=True)


def _series_text(series: dict[str, object]) -> str:
    params = series.get("params") or {}
    parts = [f"{series['workload']} {series['site']}" + (f":{series['system']}" if series.get("system") else ""),
             f"{series['devices']}x {series['precision']}"]
    parts += [f"{k}={v}" for k, v in (params.items() if isinstance(params, dict) else ())
              if k not in ("warmup", "iters")]
    return " ".join(parts)


def regressions(
    ctx: typer.Context,
    sweep: SweepOpt = None,
    metric: Annotated[Optional[str], typer.Option(
        "--metric", help="The figure to follow (default: each series' headline: its median-step rate, "
        "tokens_per_s_median, samples_per_s_median or tflops_median, else tflops or bandwidth_gbs).")]
    = None,
    fail_on: Annotated[FailOn, typer.Option("--fail-on", help="Exit 1 when a change point of this kind is found "
                                            "(regression: worse; change: either way).")] = FailOn.never,
    as_json: JsonOpt = False,
) -> None:
    """Change points per series (workload, site, configuration, figure; one point per epoch, the median
    of its repeats), each with its size, significance, the runs on both sides and what changed between
    them (software and driver versions, node list, orch version, profile hash, script lines).

    Exit 1 with [bold]--fail-on regression[/bold] when a series got worse (for a CI job), 0 otherwise."""
    from orchestrator.results.regressions import find_regressions

    c = orch_context(ctx)
    findings = find_regressions(c.engine, sweep, metric)
    if as_json:
        print_json([f.as_json() for f in findings])
    elif not findings:
        console.print("no change points" + (f" in sweep {sweep}" if sweep else ""), markup=False)
    else:
        rows = [[f.kind, _series_text(f.series), f.metric, f"{f.epoch_before} -> {f.epoch_after}",
                 f"{f.before:.4g} -> {f.after:.4g}", f"{f.magnitude:+.1%}", f"{f.p_value:.1e}",
                 " ".join(r["run_id"] for r in f.runs_after), "\n".join(f.changed) or "(nothing orch records)"]
                for f in findings]
        print_table(["kind", "series", "metric", "epochs", "level", "change", "p", "runs", "what changed"], rows,
                    title="change points")
    hit = [f for f in findings if fail_on == FailOn.change or (fail_on == FailOn.regression and f.kind == "regression")]
    if hit:
        raise typer.Exit(1)


__all__ = ["again", "regressions"]
