"""What the figure builders share: units, the views' grouping keys, first runs per group,
labels of what differs, caps and sampling."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from orchestrator.results.report.model import (
    MAX_POINTS,
    MAX_TABLE_ROWS,
    Table,
)
from orchestrator.results.report.source import Source, key_of

METRIC_UNITS = {"tokens_per_s": "tokens/s", "samples_per_s": "samples/s", "tflops": "TFLOP/s",
                "bandwidth_gbs": "GB/s (bus bandwidth per device)"}
# The grouping of repeat_spread: one configuration.
SPREAD_KEYS = ["sweep", "experiment", "workload", "site", "system", "device_model", "devices", "nodes", "precision",
               "strategy", "batch_size", "seq_len", "params", "throughput_metric"]
SCALING_KEYS = ["sweep", "workload", "site", "system", "device_model", "precision", "strategy", "seq_len", "params",
                "throughput_metric"]


# ------------------------------------------------------------------ helpers

def unit(metric: str | None) -> str:
    return METRIC_UNITS.get(metric or "", metric or "throughput")


def first_runs(src: Source, columns: Sequence[str], relation: str = "throughput",
               where: str = "") -> dict[tuple[Any, ...], tuple[str, int]]:
    """For each group of ``columns`` in ``relation``: its first run by id and how many rows it has
    (the runs behind an aggregated point)."""
    cols = ", ".join(columns)
    rows = src.query(f"SELECT {cols}, MIN(run_id) AS first_run, COUNT(*) AS n FROM {relation} "
                     f"WHERE 1=1{where}{src.where_sweep()} GROUP BY {cols}")
    return {key_of(r, columns): (r["first_run"], r["n"]) for r in rows}


def coarser(index: dict[tuple[Any, ...], tuple[str, int]], columns: Sequence[str],
            keep: Sequence[str]) -> dict[tuple[Any, ...], tuple[str, int]]:
    """``first_runs`` by fewer columns, from the index by more (same answer as a second GROUP BY
    over every row: the first of the first runs, the sum of the counts)."""
    positions = [list(columns).index(c) for c in keep]
    merged: dict[tuple[Any, ...], tuple[str, int]] = {}
    for key, (run_id, count) in index.items():
        short = tuple(key[i] for i in positions)
        if short in merged:
            first, total = merged[short]
            merged[short] = (min(first, run_id), total + count)
        else:
            merged[short] = (run_id, count)
    return merged


def varying_labels(rows: Sequence[dict[str, Any]], parts: Sequence[Callable[[dict[str, Any]], str]],
                   tiebreak: Callable[[dict[str, Any]], str] | None = None) -> list[str]:
    """A label per row made of the ``parts`` that differ between rows (all the same: the first);
    ``tiebreak`` is appended to labels that would still be shared by several rows."""
    texts = [[part(row) for part in parts] for row in rows]
    keep = [i for i in range(len(parts)) if len({t[i] for t in texts}) > 1] or [0]
    labels = [" · ".join(t[i] for i in keep if t[i]) or "-" for t in texts]
    if tiebreak is not None:
        counts: dict[str, int] = defaultdict(int)
        for label in labels:
            counts[label] += 1
        labels = [f"{label} · {tiebreak(row)}" if counts[label] > 1 else label for label, row in zip(labels, rows)]
    return labels


def sampled(src: Source, select: str, relation_where: str, notes: list[str], **params: Any) -> list[dict[str, Any]]:
    """Rows for a figure with one mark per run: at most MAX_POINTS, beyond that every k-th by run
    id, k = ceil(n / MAX_POINTS) (the rule is added to ``notes``)."""
    rows, total = src.sampled(select, relation_where, MAX_POINTS, **params)
    if total > len(rows):
        notes.append(f"{total:,} results: one in {math.ceil(total / MAX_POINTS)} by run id is drawn "
                     f"({len(rows):,}; the views keep them all)")
    return rows


def per_attempt(src: Source, rows: list[dict[str, Any]],
                names: Sequence[str]) -> dict[tuple[str, int], dict[str, float]]:
    """Named metrics (table metric_values) of the attempts behind ``rows`` (run_id, attempt)."""
    found: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    ids = sorted({r["run_id"] for r in rows})
    for start in range(0, len(ids), 500):
        for m in src.query("SELECT a.run_id, a.number, mv.name, mv.value FROM attempts a "
                           "JOIN metric_values mv ON mv.attempt_id = a.id "
                           "WHERE a.run_id IN :ids AND mv.name IN :names", ids=ids[start:start + 500],
                           names=list(names)):
            found[(m["run_id"], m["number"])][m["name"]] = m["value"]
    return found


def capped(items: list[Any], limit: int, what: str, notes: list[str]) -> list[Any]:
    if len(items) > limit:
        notes.append(f"{len(items) - limit} more {what} not drawn (the first {limit} are)")
        return items[:limit]
    return items


def table(columns: list[str], rows: list[dict[str, Any]], attrs: list[str]) -> Table:
    kept = rows[:MAX_TABLE_ROWS]
    return Table(columns, kept, attrs, truncated=len(rows) - len(kept))


def log_base(values: Sequence[float | str | None], base: int = 2) -> int | None:
    """A log axis when the values are all positive numbers and span a factor of 4 (base 2) or 10 (base 10)."""
    positive = [v for v in values if isinstance(v, (int, float)) and v > 0]
    if positive and len(positive) == len(values) and max(positive) / min(positive) >= max(4, base):
        return base
    return None


def natural(text: str) -> list[Any]:
    """Sort key that puts seq=32 before seq=128."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]
