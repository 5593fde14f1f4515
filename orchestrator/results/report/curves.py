"""Per-step curves: the training loss against the optimiser step (``loss_curve``).

The shapes of study A's Fig. 8 (GPT-2 XL's loss over the steps on each system) and study D's
Fig. 4 (convergence of one model on several systems or settings): one panel per workload and
model, one line per run group (a configuration: everything but the repeat), the mean over its
repeats' losses at each step with whiskers from min to max. The points come from the table
``metric_series`` (migration 0014: ``series.loss`` of each metrics file, every k-th step).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from orchestrator.results.report.model import (
    MAX_PANELS,
    MAX_SERIES,
    MAX_TABLE_ROWS,
    FigureData,
    Panel,
    Point,
    Series,
    Skip,
    Table,
)
from orchestrator.results.report.source import Source, config_label, key_of, params_of, system_label

KEY, TITLE = "loss_curve", "Training loss against step"
# The configuration of a run: a line joins the repeats of one.
GROUP = ["sweep", "experiment", "workload", "site", "system", "device_model", "devices", "precision", "strategy",
         "batch_size", "seq_len", "params"]
MAX_CURVE_POINTS = 200  # marks per line; a longer series is thinned to every k-th step


def loss_curve(src: Source) -> FigureData | Skip:
    why = src.missing("results", ["run_id", "attempt", "status", *GROUP]) or src.missing(
        "metric_series", ["attempt_id", "name", "step", "value"])
    if why:
        return Skip(KEY, TITLE, why)
    cols = ", ".join(f"r.{c}" for c in ["run_id", *GROUP])
    rows = src.query(f"SELECT {cols}, ms.step, ms.value FROM results r "
                     "JOIN attempts a ON a.run_id = r.run_id AND a.number = r.attempt "
                     "JOIN metric_series ms ON ms.attempt_id = a.id "
                     f"WHERE r.status = 'completed' AND ms.name = 'loss'{src.where_sweep('r')} "
                     "ORDER BY r.run_id, ms.step")
    if not rows:
        return Skip(KEY, TITLE, "no completed run has a per-step loss (series.loss: gpt2, genslm training)")
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        group = groups.setdefault(key_of(row, GROUP), {"row": row, "runs": set(), "steps": defaultdict(list)})
        group["runs"].add(row["run_id"])
        group["steps"][row["step"]].append(row["value"])
    notes: list[str] = []
    by_panel: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for group in groups.values():
        row = group["row"]
        by_panel[(row["workload"], str(params_of(row).get("model", "")))].append(group)
    panel_keys = sorted(by_panel)
    if len(panel_keys) > MAX_PANELS:
        notes.append(f"{len(panel_keys) - MAX_PANELS} more workloads/models not drawn")
        panel_keys = panel_keys[:MAX_PANELS]
    panels, table_rows = [], []
    for workload, model in panel_keys:
        members = sorted(by_panel[(workload, model)], key=lambda g: (system_label(g["row"]), min(g["runs"])))
        if len(members) > MAX_SERIES:
            notes.append(f"{len(members) - MAX_SERIES} more run groups of {workload} {model} not drawn")
            members = members[:MAX_SERIES]
        series = []
        for group in members:
            row, first = group["row"], min(group["runs"])
            label = f"{system_label(row)} · {row['precision']} · {config_label(row, drop=['model'])}"
            steps = sorted(group["steps"])
            thin = max(1, math.ceil(len(steps) / MAX_CURVE_POINTS))
            points = []
            for step in steps[::thin]:
                values = group["steps"][step]
                spread = len(values) > 1
                points.append(Point(step, sum(values) / len(values), first, min(values) if spread else None,
                                    max(values) if spread else None))
            series.append(Series(label, points, marker="."))
            last = group["steps"][steps[-1]]
            table_rows.append({"run_id": first, "configuration": f"{workload} {model} · {label}",
                               "runs": len(group["runs"]), "steps": steps[-1], "points": len(steps),
                               "first_loss": sum(group["steps"][steps[0]]) / len(group["steps"][steps[0]]),
                               "last_loss": sum(last) / len(last)})
        panels.append(Panel(f"{workload} {model}".strip(), "optimiser step", "loss", "lines", series))
    caption = ("Training loss against the optimiser step (table metric_series, name 'loss': the loss of every k-th "
               "step as the workload wrote it, warm-up included), one line per run group; the mean over its "
               "repeats, whiskers min to max. Study A Fig. 8 and study D Fig. 4 have this shape.")
    kept = table_rows[:MAX_TABLE_ROWS]
    return FigureData(KEY, TITLE, caption, panels,
                      Table(["configuration", "runs", "steps", "points", "first_loss", "last_loss"], kept,
                            ["first_loss", "last_loss"], truncated=len(table_rows) - len(kept)), notes)
