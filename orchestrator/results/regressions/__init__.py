"""Regressions: per series (workload, site and system, configuration, figure; one point per
epoch, the median of its repeats), the change points its history shows, each with what changed
between its two sides, read from the provenance tables (orchestrator/results/regressions/changes.py).

A series is as long as the sweep has been repeated (``orch again``); the detector is in
detect.py, the queries in history.py. References (orchestrator/results/references.py) stay what
they are: one run far from a stored figure is flagged at once; a change point is what the history
says.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from orchestrator.errors import UserError
from orchestrator.results.regressions.changes import what_changed
from orchestrator.results.regressions.detect import MIN_SIZE, change_points
from orchestrator.results.regressions.history import (
    FIGURES,
    HEADLINE,
    LOWER_IS_BETTER,
    SERIES_KEY,
    Observation,
    epochs,
    observations,
    scripts,
)


@dataclass
class Point:
    """One epoch of a series: the median of its repeats' figures."""

    epoch: int
    value: float
    finished_at: datetime | None
    observations: list[Observation]


@dataclass
class Finding:
    """A change point of one series."""

    series: dict[str, Any]  # SERIES_KEY's fields
    metric: str
    kind: str  # "regression" (worse) or "improvement"
    epoch_before: int  # the last epoch before the change
    epoch_after: int  # the first epoch after it
    before: float  # the level before (geometric mean of the segment's points)
    after: float
    magnitude: float  # after / before - 1
    p_value: float
    runs_before: list[dict[str, Any]]  # the attempts of epoch_before: run id, attempt id, value
    runs_after: list[dict[str, Any]]
    changed: list[str]  # what changed between the two epochs' provenance
    points: list[tuple[int, float]] = field(default_factory=list)  # the whole series: (epoch, value)

    def as_json(self) -> dict[str, Any]:
        return {"series": self.series, "metric": self.metric, "kind": self.kind, "epoch_before": self.epoch_before,
                "epoch_after": self.epoch_after, "before": self.before, "after": self.after,
                "magnitude": self.magnitude, "p_value": self.p_value, "runs_before": self.runs_before,
                "runs_after": self.runs_after, "what_changed": self.changed,
                "points": [{"epoch": e, "value": v} for e, v in self.points]}


def _series(rows: list[Observation]) -> dict[tuple[Any, ...], list[Observation]]:
    out: dict[tuple[Any, ...], list[Observation]] = {}
    for row in rows:
        out.setdefault(row.key, []).append(row)
    return out


def _metric_of(rows: list[Observation], metric: str | None) -> str | None:
    if metric:
        return metric
    return next((name for name in HEADLINE if any(name in r.figures for r in rows)), None)


def _points(rows: list[Observation], metric: str) -> list[Point]:
    by_epoch: dict[int, dict[str, Observation]] = {}
    for row in rows:  # ordered by attempt: the last completed attempt of a run in an epoch counts
        if metric in row.figures and row.figures[metric] > 0:
            by_epoch.setdefault(row.epoch, {})[row.run_id] = row
    points = []
    for epoch in sorted(by_epoch):
        kept = list(by_epoch[epoch].values())
        times = [r.finished_at for r in kept if r.finished_at is not None]
        points.append(Point(epoch, statistics.median(r.figures[metric] for r in kept), max(times, default=None),
                            kept))
    return points


def _runs(point: Point, metric: str) -> list[dict[str, Any]]:
    return [{"run_id": r.run_id, "attempt_id": r.attempt_id, "epoch": r.epoch, "repeat": r.repeat,
             "value": r.figures[metric]} for r in point.observations]


def find_regressions(engine: Engine, sweep: str | None = None, metric: str | None = None) -> list[Finding]:
    """Every change point of every series (of ``sweep``), newest series order kept stable."""
    if metric is not None and metric not in FIGURES:
        raise UserError(f"--metric {metric}: not a figure a series can follow; expected one of "
                        f"{', '.join(sorted(FIGURES))}")
    if epochs(engine, sweep) < 2 * MIN_SIZE:  # too short a history for any change point: no query
        return []
    rows = observations(engine, sweep)
    findings: list[Finding] = []
    for key, series_rows in _series(rows).items():
        name = _metric_of(series_rows, metric)
        if name is None:
            continue
        points = _points(series_rows, name)
        for change in change_points([p.value for p in points]):
            before, after = points[change.index - 1], points[change.index]
            worse = change.magnitude > 0 if name in LOWER_IS_BETTER else change.magnitude < 0
            texts = scripts(engine, {r.script_hash for r in before.observations + after.observations
                                     if r.script_hash})
            series = dict(zip(SERIES_KEY, key))
            series["params"] = json.loads(series["params"] or "{}")
            findings.append(Finding(
                series=series, metric=name, kind="regression" if worse else "improvement",
                epoch_before=before.epoch, epoch_after=after.epoch, before=change.before, after=change.after,
                magnitude=change.magnitude, p_value=change.p_value, runs_before=_runs(before, name),
                runs_after=_runs(after, name), changed=what_changed(before.observations, after.observations, texts),
                points=[(p.epoch, p.value) for p in points]))
    return findings
