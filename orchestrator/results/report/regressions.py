"""The report's regressions section: each series with a change point (``orch regressions``),
drawn with its points, the change marked and the two levels, what changed between the two sides
written under it."""

from __future__ import annotations

from sqlalchemy import Engine

from orchestrator.results.regressions import Finding, find_regressions
from orchestrator.results.report.model import FigureData, Panel, Point, RefLine, Series, Table


def _label(f: Finding) -> str:
    s = f.series
    params = " ".join(f"{k}={v}" for k, v in (s.get("params") or {}).items() if k not in ("warmup", "iters"))
    site = f"{s['site']}:{s['system']}" if s.get("system") else s["site"]
    return f"{s['workload']} on {site}, {s['devices']}x {s['precision']} {params}".strip()


def _figure(number: int, f: Finding) -> FigureData:
    runs = {r["epoch"]: r["run_id"] for r in f.runs_before + f.runs_after}
    points = [Point(float(epoch), value, runs.get(epoch)) for epoch, value in f.points]
    values = [v for _, v in f.points]
    low, high = min(values), max(values)
    edge = (f.epoch_before + f.epoch_after) / 2
    first, last = f.points[0][0], f.points[-1][0]
    refs = [RefLine(f"change ({f.magnitude:+.1%}, p={f.p_value:.1e})", xs=[edge, edge], ys=[low, high], style=":"),
            RefLine("level before", xs=[first, edge], ys=[f.before, f.before]),
            RefLine("level after", xs=[edge, last], ys=[f.after, f.after])]
    panel = Panel(title=_label(f), xlabel="epoch", ylabel=f"{f.metric} (median of repeats)", kind="lines",
                  series=[Series(f.metric, points)], refs=refs)
    rows = [{"epoch": epoch, f.metric: value, "run_id": runs.get(epoch)} for epoch, value in f.points]
    changed = f.changed or ["nothing orch records changed (the cause is outside the provenance tables)"]
    return FigureData(
        key=f"regression-{number}", title=f"{f.kind.capitalize()}: {_label(f)}",
        caption=(f"{f.metric} per epoch of sweep {f.series['sweep']} (each point the median of its repeats); a "
                 f"change point between epochs {f.epoch_before} and {f.epoch_after}: {f.before:.4g} -> "
                 f"{f.after:.4g} ({f.magnitude:+.1%}, t-test p = {f.p_value:.1e})."),
        panels=[panel], table=Table(["epoch", f.metric, "run_id"], rows),
        notes=[f"what changed from epoch {f.epoch_before} to {f.epoch_after}: {line}" for line in changed])


def regression_figures(engine: Engine, sweeps: list[str]) -> list[FigureData]:
    """One figure per change point of the sweeps' series (of every sweep when none is named)."""
    targets: list[str | None] = [*sweeps] or [None]
    findings = [f for sweep in targets for f in find_regressions(engine, sweep)]
    return [_figure(i + 1, f) for i, f in enumerate(findings)]
