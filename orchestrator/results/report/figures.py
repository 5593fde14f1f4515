"""One builder per figure of the studies, each reading its view with SQL.

A builder returns a ``FigureData`` or a ``Skip`` saying why the figure is not drawn: no
rows for it (a sweep with only GEMMs gets the primitive figures and no scaling curve),
or no view for it in this database. The numbers plotted are the views' columns as they
come (mean over repeats from ``repeat_spread``, speedup and efficiency from ``scaling``,
prices from ``cost``...); builders select, group and order rows, never recompute a figure
the views define. Where a point stands for several runs (repeats), it links to the first
run by id and the table says how many there are.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from orchestrator.results.report.curves import loss_curve
from orchestrator.results.report.model import (
    MAX_CATEGORIES,
    MAX_PANELS,
    MAX_POINTS,
    MAX_SERIES,
    MAX_TABLE_ROWS,
    FigureData,
    Panel,
    Point,
    RefLine,
    Series,
    Skip,
    Table,
)
from orchestrator.results.report.source import Source, config_label, key_of, number, params_of, shorten, system_label
from orchestrator.states import AttemptState, FailureClass

Builder = Callable[[Source], "FigureData | Skip"]

METRIC_UNITS = {"tokens_per_s": "tokens/s", "samples_per_s": "samples/s", "tflops": "TFLOP/s",
                "bandwidth_gbs": "GB/s (bus bandwidth per device)"}
# Study C.1's DL primitives (workloads/primitives.py, gemm.py).
PRIMITIVES = ("gemm", "conv2d", "relu", "lstm")
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


# ------------------------------------------------------------------ throughput bars

def throughput_by_system(src: Source) -> FigureData | Skip:
    key, title = "throughput", "Throughput by system and precision"
    why = src.missing("repeat_spread", SPREAD_KEYS + ["repeats", "mean", "min", "max"])
    if why:
        return Skip(key, title, why)
    rows = src.query(f"SELECT * FROM repeat_spread WHERE mean IS NOT NULL{src.where_sweep()}")
    if not rows:
        return Skip(key, title, "no completed results with a throughput (tokens/s, samples/s, TFLOP/s or GB/s)")
    runs = first_runs(src, SPREAD_KEYS)
    notes: list[str] = []
    by_panel: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_panel[(row["workload"], row["throughput_metric"] or "")].append(row)
    panels, table_rows = [], []
    for (workload, metric) in capped(sorted(by_panel), MAX_PANELS, "workloads", notes):
        group = sorted(by_panel[(workload, metric)],
                       key=lambda r: (r["sweep"], r["experiment"], r["devices"] or 0, natural(config_label(r)),
                                      system_label(r), r["precision"]))
        categories = varying_labels(group, [lambda r: r["sweep"], lambda r: r["experiment"], config_label])
        order = list(dict.fromkeys(categories))
        shown = set(capped(order, MAX_CATEGORIES, f"configurations of {workload}", notes))
        series: dict[str, list[Point]] = defaultdict(list)
        for row, category in zip(group, categories):
            run_id, count = runs.get(key_of(row, SPREAD_KEYS), (None, 0))
            hue = f"{system_label(row)} · {row['precision']}"
            spread = (row["repeats"] or 0) > 1
            if category in shown:
                series[hue].append(Point(category, row["mean"], run_id, row["min"] if spread else None,
                                         row["max"] if spread else None))
            table_rows.append({"run_id": run_id, "runs": count, "workload": workload, "configuration": category,
                               "system": system_label(row), "precision": row["precision"], "metric": metric,
                               "repeats": row["repeats"], "mean": row["mean"], "min": row["min"],
                               "max": row["max"]})
        hues = capped(sorted(series), MAX_SERIES, f"systems and precisions of {workload}", notes)
        panels.append(Panel(f"{workload}", "configuration", unit(metric), "bars",
                            [Series(h, series[h]) for h in hues], categories=[c for c in order if c in shown]))
    caption = ("Mean throughput over repeats (view repeat_spread: tokens/s for language models, samples/s for "
               "other models, TFLOP/s for kernels, GB/s for collectives), one bar per system and precision; "
               "whiskers span min to max where a configuration was repeated.")
    return FigureData(key, title, caption, panels,
                      table(["workload", "configuration", "system", "precision", "metric", "repeats", "mean", "min",
                             "max", "runs"], table_rows, ["mean", "min", "max", "repeats"]), notes)


# ------------------------------------------------------------------ summary

def summary(src: Source) -> FigureData | Skip:
    """What management asks for first: per workload, the best figure of each system and precision,
    and its performance per price, with how much to trust it (repeats, spread)."""
    key, title = "summary", "Summary: the best figure per system and precision"
    why = src.missing("repeat_spread", SPREAD_KEYS + ["repeats", "mean", "min", "max"])
    if why:
        return Skip(key, title, why)
    rows = src.query(f"SELECT * FROM repeat_spread WHERE mean IS NOT NULL{src.where_sweep()}")
    if not rows:
        return Skip(key, title, "no completed results with a throughput")
    runs = first_runs(src, SPREAD_KEYS)
    prices: dict[str, dict[str, Any]] = {}
    if not src.missing("cost", ["run_id", "throughput_per_price", "tflops_per_device_per_price", "price_currency"]):
        for row in src.query("SELECT run_id, throughput_per_price, tflops_per_device_per_price, price_currency "
                             f"FROM cost WHERE price_per_device_hour IS NOT NULL{src.where_sweep()}"):
            prices[row["run_id"]] = row
    # The serving view pivots every metric value before it filters: asked only when serving ran.
    goodput = _serving_goodput(src) if any(r["workload"] == "llm_serving" for r in rows) else {}
    best: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for row in rows:
        # Ranked per device (issue 53: by the total, a system that ran on more devices won), and a
        # serving run by its goodput under its SLO rather than its raw tokens/s.
        run_id = runs.get(key_of(row, SPREAD_KEYS), (None, 0))[0]
        metric, figure = row["throughput_metric"] or "", row["mean"]
        if row["workload"] == "llm_serving" and run_id in goodput:
            metric, figure = "goodput_requests_per_s", goodput[run_id]
        row = {**row, "throughput_metric": metric, "mean": figure, "per_device": figure / max(1, row["devices"] or 1)}
        group = (row["workload"], metric, system_label(row), row["precision"])
        if group not in best or row["per_device"] > best[group]["per_device"]:
            best[group] = row
    notes: list[str] = []
    panels: list[Panel] = []
    table_rows: list[dict[str, Any]] = []
    by_workload: dict[tuple[str, str], list[tuple[str, str, dict[str, Any]]]] = defaultdict(list)
    for (workload, metric, system, precision), row in sorted(best.items()):
        by_workload[(workload, metric)].append((system, precision, row))
    for workload, metric in capped(sorted(by_workload), MAX_PANELS, "workloads", notes):
        series: dict[str, list[Point]] = defaultdict(list)
        for system, precision, row in by_workload[(workload, metric)]:
            run_id, count = runs.get(key_of(row, SPREAD_KEYS), (None, 0))
            price = prices.get(run_id or "", {})
            per_price = number(price.get("tflops_per_device_per_price")) or number(price.get("throughput_per_price"))
            spread = ((row["max"] - row["min"]) / row["mean"]) if (row["repeats"] or 0) > 1 and row["mean"] else None
            flags = "; ".join(f for f in (
                "single repeat" if (row["repeats"] or 0) <= 1 else "",
                f"spread {spread:.0%} of the mean" if spread is not None and spread > 0.10 else "") if f)
            series[precision].append(Point(system, row["per_device"], run_id))
            table_rows.append({"run_id": run_id, "workload": workload, "system": system, "precision": precision,
                               "configuration": config_label(row), "metric": metric, "devices": row["devices"],
                               "best_per_device": row["per_device"], "best_mean": row["mean"],
                               "repeats": row["repeats"], "per_price": per_price,
                               "per_price_unit": ("TFLOP/s per device per " if number(
                                   price.get("tflops_per_device_per_price")) else "work per ")
                               + f"{price.get('price_currency') or ''}/hour" if per_price is not None else None,
                               "flags": flags})
        systems = sorted({p.x for pts in series.values() for p in pts}, key=str)
        panels.append(Panel(workload, "system", f"{unit(metric)} per device", "bars",
                            [Series(p, series[p]) for p in sorted(series)], categories=[str(x) for x in systems]))
    caption = ("Per workload, the best mean throughput per device (view repeat_spread: mean over repeats, divided "
               "by the run's devices, so systems that ran on different device counts compare fairly; serving "
               "runs by their goodput under the SLO, view serving) each system reached "
               "in each precision, and its performance per price (view cost: TFLOP/s per device per price per "
               "device-hour, or throughput per price). Flags: a figure from a single repeat, or repeats spread by "
               "more than 10% of their mean. The figures below show every configuration.")
    return FigureData(key, title, caption, panels,
                      table(["workload", "system", "precision", "configuration", "metric", "devices",
                             "best_per_device", "best_mean", "repeats", "per_price", "per_price_unit", "flags"],
                            table_rows, ["best_per_device", "best_mean", "per_price", "repeats", "flags"]), notes)


def _serving_goodput(src: Source) -> dict[str, float]:
    """Each serving run's best goodput (requests/s within its SLO, view serving) by run id."""
    if src.missing("serving", ["run_id", "goodput_requests_per_s"]):
        return {}
    rows = src.query("SELECT run_id, MAX(goodput_requests_per_s) AS goodput FROM serving "
                     f"WHERE goodput_requests_per_s IS NOT NULL{src.where_sweep()} GROUP BY run_id")
    return {r["run_id"]: float(r["goodput"]) for r in rows if number(r["goodput"]) is not None}


# ------------------------------------------------------------------ scaling

# Serving workloads: their scaling (tensor parallel across devices, latency against batch) is not
# training's data-parallel weak scaling, so they never share a figure's axes with it (issue 27).
INFERENCE_WORKLOADS = ("llm_inference", "llm_serving")
# A point read with care: efficiency above this is superlinear (cache effects, a slow base run,
# noise), and from one repeat nothing says which.
SUPERLINEAR = 1.0


def scaling_flags(row: dict[str, Any]) -> str:
    """Why a scaling point should be read with care (empty: nothing to say)."""
    flags = []
    efficiency, repeats = number(row.get("efficiency")), row.get("repeats")
    if efficiency is not None and efficiency > SUPERLINEAR:
        flags.append(f"efficiency {efficiency:.2f} > 1 (superlinear)"
                     + (" from a single repeat: re-run before reading it" if (repeats or 0) <= 1 else ""))
    elif (repeats or 0) <= 1:
        flags.append("single repeat")
    return "; ".join(flags)


def scaling(src: Source) -> FigureData | Skip:
    return _scaling(src, inference=False)


def scaling_inference(src: Source) -> FigureData | Skip:
    return _scaling(src, inference=True)


def _scaling(src: Source, inference: bool) -> FigureData | Skip:
    key, title = (("scaling-inference", "Inference: throughput against devices (its own axes, not training's)")
                  if inference else ("scaling", "Speedup and efficiency against devices (weak and strong scaling)"))
    why = src.missing("scaling", SCALING_KEYS + ["batch_size", "devices", "repeats", "throughput", "base_devices",
                                                 "speedup", "efficiency"])
    if why:
        return Skip(key, title, why)
    columns = src.columns("scaling")
    names = ", ".join(f"'{w}'" for w in INFERENCE_WORKLOADS)
    kind = f" AND workload {'IN' if inference else 'NOT IN'} ({names})"
    rows = src.query(f"SELECT * FROM scaling WHERE 1=1{kind}{src.where_sweep()}")
    if not rows:
        return Skip(key, title, f"no {'inference' if inference else 'training or kernel'} configuration was run at "
                                "two or more device counts")
    weak_runs = coarser(first_runs(src, SPREAD_KEYS), SPREAD_KEYS, SCALING_KEYS + ["batch_size", "devices"])
    strong_runs = (first_runs(src, SCALING_KEYS + ["global_batch", "devices"], where=" AND global_batch IS NOT NULL")
                   if "global_batch" in src.columns("throughput") else {})
    notes: list[str] = []
    if "mode" not in columns:
        notes.append("this database's scaling view has no mode column: its rows keep the per-device batch (weak)")
    by_mode: dict[str, dict[tuple[Any, ...], list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        mode = row.get("mode") or "weak"
        batch = "global_batch" if mode == "strong" else "batch_size"
        by_mode[mode][key_of(row, SCALING_KEYS + [batch])].append(row)
    panels, table_rows = [], []
    for mode in sorted(by_mode, key=lambda m: (m != "weak", m)):
        groups = by_mode[mode]
        batch = "global_batch" if mode == "strong" else "batch_size"
        index = strong_runs if mode == "strong" else weak_runs
        keys = capped(sorted(groups, key=str), MAX_SERIES, f"{mode} scaling configurations", notes)
        firsts = [groups[k][0] for k in keys]
        labels = varying_labels(firsts, [
            lambda r: r["workload"], system_label, lambda r: r["precision"],
            partial(config_label, drop=["devices", "batch_size" if mode == "strong" else "global_batch"]),
            lambda r: r["sweep"]])
        speed: list[Series] = []
        eff: list[Series] = []
        ideal: dict[float, set[float]] = {}
        for group_key, label in zip(keys, labels):
            points = sorted(groups[group_key], key=lambda r: r["devices"])
            links = [index.get(key_of(r, SCALING_KEYS + [batch, "devices"]), (None, 0)) for r in points]
            speed.append(Series(label, [Point(r["devices"], r["speedup"], link[0]) for r, link in zip(points, links)]))
            eff.append(Series(label, [Point(r["devices"], r["efficiency"], link[0]) for r, link in zip(points, links)]))
            for r, link in zip(points, links):
                ideal.setdefault(r["base_devices"], set()).add(r["devices"])
                flags = scaling_flags(r) if r["devices"] != r["base_devices"] else ""
                if "superlinear" in flags:
                    notes.append(f"{label} at {r['devices']} devices: {flags}")
                table_rows.append({"run_id": link[0], "runs": link[1], "mode": mode, "configuration": label,
                                   "devices": r["devices"], "base_devices": r["base_devices"], "repeats": r["repeats"],
                                   "throughput": r["throughput"], "metric": r["throughput_metric"],
                                   "speedup": r["speedup"], "efficiency": r["efficiency"],
                                   "epoch_efficiency": r.get("epoch_efficiency"), "flags": flags})
        devices = sorted({d for ds in ideal.values() for d in ds})
        refs = [RefLine("ideal", xs=[d for d in devices if d >= base], ys=[d / base for d in devices if d >= base])
                for base in sorted(ideal)]
        what = ("same per-device batch" if mode == "weak" else "same global batch" if mode == "strong" else mode)
        xlog = log_base(devices)
        panels.append(Panel(f"{mode} scaling ({what}): speedup", "devices", "speedup", "lines", speed, refs, xlog=xlog))
        panels.append(Panel(f"{mode} scaling: efficiency", "devices", "efficiency", "lines", eff,
                            [RefLine("ideal", y=1.0)], xlog=xlog))
    caption = ("View scaling: speedup = throughput / throughput at the smallest device count (base devices) of the "
               "same system and configuration, efficiency = speedup / (devices / base devices); repeats averaged "
               "by the view. Weak: the same per-device batch at every count; strong: the same global batch. "
               "The table's flags name points from a single repeat and efficiencies above 1.")
    if inference:
        caption += (" Inference workloads only: their devices split one model (tensor parallel) or serve one "
                    "batch, so their curves are never drawn on training's axes.")
    return FigureData(key, title, caption, panels,
                      table(["mode", "configuration", "devices", "base_devices", "repeats", "metric", "throughput",
                             "speedup", "efficiency", "epoch_efficiency", "flags", "runs"], table_rows,
                            ["mode", "devices", "base_devices", "throughput", "speedup", "efficiency", "flags"]), notes)


# ------------------------------------------------------------------ strategies

def size_of(row: dict[str, Any]) -> str:
    params = params_of(row)
    return str(params.get("model") or params.get("size") or "")


def strategies(src: Source) -> FigureData | Skip:
    key, title = "strategies", "Memory and time per strategy and model size"
    need = ["run_id", "sweep", "workload", "site", "system", "device_model", "devices", "precision", "strategy",
            "params", "status", "failure_class", "peak_mem_gb", "epoch_time_s", "step_time_s"]
    why = src.missing("results", need)
    if why:
        return Skip(key, title, why)
    notes: list[str] = []
    rows = sampled(src, ", ".join(need), f"results WHERE strategy IS NOT NULL{src.where_sweep()}", notes)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["sweep"], row["workload"])].append(row)
    compared = {k: v for k, v in groups.items()
                if len({r["strategy"] for r in v}) > 1 or len({size_of(r) for r in v}) > 1}
    if not compared:
        return Skip(key, title, "no sweep compares strategies or model sizes (each has one strategy and one size)"
                    if rows else "no results with a strategy")
    panels, table_rows = [], []
    for group_key in capped(sorted(compared), MAX_PANELS // 2, "sweeps comparing strategies", notes):
        group = sorted(compared[group_key], key=lambda r: (r["strategy"], size_of(r), r["devices"], r["run_id"]))
        labels = varying_labels(group, [size_of, lambda r: f"{r['devices']}dev", system_label,
                                        lambda r: r["precision"]])
        order = list(dict.fromkeys(r["strategy"] for r in group))
        uses_epoch = any(r["epoch_time_s"] is not None for r in group)
        time_column = "epoch_time_s" if uses_epoch else "step_time_s"
        memory: dict[str, list[Point]] = defaultdict(list)
        timing: dict[str, list[Point]] = defaultdict(list)
        for row, label in zip(group, labels):
            if row["status"] == AttemptState.COMPLETED:
                if number(row["peak_mem_gb"]) is not None:
                    memory[label].append(Point(row["strategy"], row["peak_mem_gb"], row["run_id"]))
                if number(row[time_column]) is not None:
                    timing[label].append(Point(row["strategy"], row[time_column], row["run_id"]))
            table_rows.append({"run_id": row["run_id"], "sweep": row["sweep"], "strategy": row["strategy"],
                               "configuration": label, "status": row["status"],
                               "failure_class": row["failure_class"], "peak_mem_gb": row["peak_mem_gb"],
                               "epoch_time_s": row["epoch_time_s"], "step_time_s": row["step_time_s"]})
        failed = [r for r in group if r["status"] != AttemptState.COMPLETED]
        if failed:
            classes: defaultdict[str, int] = defaultdict(int)
            for r in failed:
                classes[r["failure_class"] or FailureClass.FAILED] += 1
            notes.append(f"{group_key[0]}: {len(failed)} run(s) failed and have no mark ("
                         + ", ".join(f"{c}: {n}" for c, n in sorted(classes.items())) + "); see the table")
        name = f"{group_key[1]} ({group_key[0]})"
        labels_shown = capped(sorted(set(memory) | set(timing)), MAX_SERIES, f"configurations of {name}", notes)
        panels.append(Panel(f"{name}: peak memory", "strategy", "peak memory (GB)", "strip",
                            [Series(s, memory[s]) for s in labels_shown], categories=order))
        panels.append(Panel(f"{name}: {'epoch' if uses_epoch else 'step'} time", "strategy",
                            f"{'epoch' if uses_epoch else 'step'} time (s)", "strip",
                            [Series(s, timing[s]) for s in labels_shown], categories=order))
    caption = ("View results, one mark per run: peak memory (allocator peak on devices, maximum RSS on CPU) and "
               "epoch time (else the median step time) per strategy, coloured by model size; failed runs (e.g. "
               "out of memory) are listed in the table.")
    return FigureData(key, title, caption, panels,
                      table(["sweep", "strategy", "configuration", "status", "failure_class", "peak_mem_gb",
                             "epoch_time_s", "step_time_s"], table_rows, ["peak_mem_gb", "epoch_time_s"]), notes)


# ------------------------------------------------------------------ one axis swept: sequence length, GAS

def axis_sweep(src: Source, key: str, title: str, axis: str, xlabel: str, get_x: Callable[[dict[str, Any]], Any],
               series_drop: Sequence[str], caption: str) -> FigureData | Skip:
    """Mean throughput (repeat_spread) against one swept axis, one line per configuration that
    was run at two or more values of it."""
    why = src.missing("repeat_spread", SPREAD_KEYS + ["repeats", "mean", "min", "max"])
    if why:
        return Skip(key, title, why)
    rows = [r for r in src.query(f"SELECT * FROM repeat_spread WHERE mean IS NOT NULL{src.where_sweep()}")
            if number(get_x(r)) is not None]

    def series_key(row: dict[str, Any]) -> tuple[Any, ...]:
        params = {k: v for k, v in params_of(row).items() if k not in series_drop}
        return key_of(row, [c for c in SPREAD_KEYS if c not in ("params", *series_drop)]) + (
            json.dumps(params, sort_keys=True),)

    lines: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        lines[series_key(row)].append(row)
    swept = {k: v for k, v in lines.items() if len({number(get_x(r)) for r in v}) > 1}
    if not swept:
        return Skip(key, title, f"no configuration was run at two or more values of {axis}")
    runs = first_runs(src, SPREAD_KEYS)
    notes: list[str] = []
    by_panel: dict[tuple[str, str], list[tuple[Any, ...]]] = defaultdict(list)
    for k, v in swept.items():
        by_panel[(v[0]["workload"], v[0]["throughput_metric"] or "")].append(k)
    panels, table_rows = [], []
    for workload, metric in capped(sorted(by_panel), MAX_PANELS, "workloads", notes):
        keys = capped(sorted(by_panel[(workload, metric)], key=str), MAX_SERIES, f"configurations of {workload}",
                      notes)
        firsts = [swept[k][0] for k in keys]
        labels = varying_labels(firsts, [system_label, lambda r: r["precision"],
                                         lambda r: config_label(r, drop=series_drop), lambda r: r["sweep"]])
        series, xs = [], []
        for k, label in zip(keys, labels):
            points = []
            for row in sorted(swept[k], key=lambda r: number(get_x(r)) or 0):
                run_id, count = runs.get(key_of(row, SPREAD_KEYS), (None, 0))
                x = number(get_x(row))
                xs.append(x)
                spread = (row["repeats"] or 0) > 1
                # No x (a NULL): NaN, which the drawing drops as it drops every value that is not finite.
                points.append(Point(math.nan if x is None else x, row["mean"], run_id, row["min"] if spread else None,
                                    row["max"] if spread else None))
                table_rows.append({"run_id": run_id, "runs": count, "configuration": f"{workload} · {label}",
                                   axis: get_x(row), "repeats": row["repeats"], "mean": row["mean"],
                                   "min": row["min"], "max": row["max"], "metric": metric})
            series.append(Series(label, points))
        panels.append(Panel(workload, xlabel, unit(metric), "lines", series, xlog=log_base(xs)))
    return FigureData(key, title, caption, panels,
                      table(["configuration", axis, "repeats", "metric", "mean", "min", "max", "runs"], table_rows,
                            [axis, "mean"]), notes)


def sequence_length(src: Source) -> FigureData | Skip:
    return axis_sweep(src, "seq_len", "Throughput against sequence length", "seq_len", "sequence length",
                      lambda r: r.get("seq_len"), ["seq_len"],
                      "Mean throughput over repeats (view repeat_spread) against the sequence length, one line per "
                      "configuration run at two or more lengths; whiskers span min to max over repeats.")


def grad_accumulation(src: Source) -> FigureData | Skip:
    return axis_sweep(src, "grad_accum", "Throughput against gradient-accumulation steps", "grad_accum",
                      "gradient-accumulation steps", lambda r: params_of(r).get("grad_accum"), ["grad_accum"],
                      "Mean throughput over repeats (view repeat_spread) against the gradient-accumulation steps "
                      "(workload parameter grad_accum) at a fixed micro-batch, one line per configuration.")


# ------------------------------------------------------------------ primitives against the peak

def primitives(src: Source) -> FigureData | Skip:
    key, title = "primitives", "Primitives against the peak (roofline)"
    need = ["run_id", "attempt", "sweep", "workload", "site", "system", "device_model", "precision", "devices",
            "params", "tflops"]
    why = src.missing("throughput", need) or src.missing("runs", ["id", "peak_tflops"])
    if why:
        return Skip(key, title, why)
    notes: list[str] = []
    rows = sampled(src, "run_id, attempt, sweep, workload, site, system, device_model, precision, devices, params, "
                   "tflops", f"throughput WHERE workload IN :workloads AND tflops IS NOT NULL{src.where_sweep()}",
                   notes, workloads=list(PRIMITIVES))
    if not rows:
        return Skip(key, title, "no primitive (" + ", ".join(PRIMITIVES) + ") results with TFLOP/s")
    rows = [dict(r) for r in rows]  # completed below with metrics and peaks
    metrics = per_attempt(src, rows, ["flops_per_step", "bytes_per_step"])
    peak_of: dict[str, Any] = {}
    ids = sorted({r["run_id"] for r in rows})
    for start in range(0, len(ids), 500):
        peak_of.update((p["id"], p["peak_tflops"]) for p in src.query(
            "SELECT id, peak_tflops FROM runs WHERE id IN :ids", ids=ids[start:start + 500]))
    for row in rows:
        reported = metrics.get((row["run_id"], row["attempt"]), {})
        row.update(flops_per_step=reported.get("flops_per_step"), bytes_per_step=reported.get("bytes_per_step"),
                   peak_tflops=peak_of.get(row["run_id"]))
    drawn = [r for r in rows if number(r["flops_per_step"]) and number(r["tflops"])]
    if len(drawn) < len(rows):
        notes.append(f"{len(rows) - len(drawn)} run(s) reported no FLOPs per step and have no mark")
    if not drawn:
        return Skip(key, title, "the primitive runs reported no FLOPs per step")
    labels = varying_labels(drawn, [lambda r: r["workload"], lambda r: r["precision"], system_label,
                                    lambda r: f"{r['devices']}dev"])
    by_size: dict[str, list[Point]] = defaultdict(list)
    by_intensity: dict[str, list[Point]] = defaultdict(list)
    for row, label in zip(drawn, labels):
        by_size[label].append(Point(row["flops_per_step"], row["tflops"], row["run_id"]))
        if number(row["bytes_per_step"]):
            by_intensity[label].append(Point(row["flops_per_step"] / row["bytes_per_step"], row["tflops"],
                                             row["run_id"]))
    peaks = {}
    for row in drawn:
        if number(row["peak_tflops"]):
            peaks[f"peak {system_label(row)} {row['precision']}"] = row["peak_tflops"]
    if not peaks:
        notes.append("no peak TFLOP/s in these sites' profiles: no peak line")
    refs = [RefLine(label, y=value, style=":") for label, value in sorted(peaks.items())[:MAX_SERIES]]
    shown = capped(sorted(by_size), MAX_SERIES, "primitive series", notes)
    tflops = [p.y for s in by_size.values() for p in s] + list(peaks.values())
    panels = [Panel("TFLOP/s against work per step", "FLOPs per step", "TFLOP/s", "lines",
                    [Series(s, by_size[s], joined=False) for s in shown], refs,
                    xlog=log_base([p.x for s in by_size.values() for p in s], 10), ylog=log_base(tflops, 10))]
    if by_intensity:
        panels.append(Panel("roofline: TFLOP/s against arithmetic intensity", "FLOPs per byte moved "
                            "(flops_per_step / bytes_per_step)", "TFLOP/s", "lines",
                            [Series(s, by_intensity[s], joined=False) for s in shown if s in by_intensity], refs,
                            xlog=log_base([p.x for s in by_intensity.values() for p in s], 10),
                            ylog=log_base(tflops, 10)))
    table_rows = [{"run_id": r["run_id"], "workload": r["workload"], "configuration": config_label(r),
                   "system": system_label(r), "precision": r["precision"], "tflops": r["tflops"],
                   "peak_tflops": r["peak_tflops"], "flops_per_step": r["flops_per_step"],
                   "bytes_per_step": r["bytes_per_step"]} for r in drawn]
    caption = ("One mark per run: TFLOP/s (view throughput, the study's FLOP count over the timed time) against the "
               "FLOPs of one step and, where the workload reports the bytes a step moves, against FLOPs per byte; "
               "dotted lines: the device's peak from the site profile at planning (runs.peak_tflops).")
    return FigureData(key, title, caption, panels,
                      table(["workload", "configuration", "system", "precision", "tflops", "peak_tflops",
                             "flops_per_step", "bytes_per_step"], table_rows, ["tflops", "flops_per_step"]), notes)


# ------------------------------------------------------------------ collectives

def collectives(src: Source) -> FigureData | Skip:
    key, title = "collectives", "Collective bandwidth against message size"
    need = ["run_id", "attempt", "sweep", "experiment", "workload", "site", "system", "device_model", "devices",
            "precision", "params"]
    why = src.missing("throughput", need) or src.missing("metric_values", ["attempt_id", "name", "value"])
    if why:
        return Skip(key, title, why)
    rows = src.query(
        "SELECT t.run_id, t.sweep, t.experiment, t.workload, t.site, t.system, t.device_model, t.devices, "
        "t.precision, t.params, mv.name, mv.value FROM throughput t "
        "JOIN attempts a ON a.run_id = t.run_id AND a.number = t.attempt "
        "JOIN metric_values mv ON mv.attempt_id = a.id "
        f"WHERE t.throughput_metric = 'bandwidth_gbs'{src.where_sweep('t')} "
        "AND (mv.name = 'message_bytes' OR mv.name LIKE 'busbw%')")
    per_run: dict[str, dict[str, Any]] = {}
    for row in rows:
        run = per_run.setdefault(row["run_id"], {**row, "sizes": {}})
        name = row["name"]
        if name == "message_bytes":
            run["message_bytes"] = row["value"]
        elif name.startswith("busbw_gbs_") and name[len("busbw_gbs_"):].isdigit():
            run["sizes"][int(name[len("busbw_gbs_"):])] = row["value"]
    runs = [r for r in per_run.values() if r["sizes"] and number(r.get("message_bytes"))]
    if not runs:
        return Skip(key, title, "no collective results with a bandwidth per message size")
    notes: list[str] = []
    runs = capped(sorted(runs, key=lambda r: (r["workload"], r["devices"], r["run_id"])), MAX_SERIES * 2,
                  "collective runs", notes)
    labels = varying_labels(runs, [lambda r: r["workload"], system_label, lambda r: f"{r['devices']} ranks",
                                   lambda r: r["precision"], lambda r: r["experiment"]],
                            tiebreak=lambda r: f"run {r['run_id'][:8]}")
    series, table_rows, peaks = [], [], {}
    for run, label in zip(runs, labels):
        # bytes per element: the message the workload sized (message_bytes, of its largest count)
        element = run["message_bytes"] / max(run["sizes"])
        points = [Point(count * element, bw, run["run_id"]) for count, bw in sorted(run["sizes"].items())]
        series.append(Series(label, points))
        link = number(params_of(run).get("peak_link_gbs"))
        if link:
            peaks[f"link peak {link:g} GB/s"] = link
        for count, bw in sorted(run["sizes"].items()):
            table_rows.append({"run_id": run["run_id"], "configuration": label, "elements": count,
                               "bytes": count * element, "busbw_gbs": bw})
    refs = [RefLine(label, y=value, style=":") for label, value in sorted(peaks.items())]
    panel = Panel("all-reduce bus bandwidth", "message size", "bus bandwidth (GB/s)", "lines", series, refs,
                  xlog=2, xbytes=True)
    caption = ("Bus bandwidth per message size as the workload reported it (metric_values busbw_gbs_<elements>: "
               "algbw x 2(n-1)/n, nccl-tests' definition), one line per run; bytes = elements x the element size "
               "of the run's message_bytes. Dotted: the link peak the sweep gave (peak_link_gbs).")
    return FigureData(key, title, caption, [panel],
                      table(["configuration", "elements", "bytes", "busbw_gbs"], table_rows, ["bytes", "busbw_gbs"]),
                      notes)


# ------------------------------------------------------------------ inference, predictions, references

INFERENCE_COLUMNS = ["run_id", "sweep", "experiment", "site", "system", "device_model", "devices", "precision", "model",
                     "concurrency", "tpot_s", "ttft_p50_s", "output_tokens_per_s"]


def inference(src: Source) -> FigureData | Skip:
    key, title = "inference", "Inference: latency against throughput"
    why = src.missing("inference", INFERENCE_COLUMNS)
    if why:
        return Skip(key, title, why + " (latency-throughput curves need one)")
    # The view pivots every metric value before it filters: ask it only when inference ran.
    if not src.query(f"SELECT run_id FROM results WHERE workload = 'llm_inference'{src.where_sweep()} LIMIT 1"):
        return Skip(key, title, "no inference results")
    extra = [c for c in ("ttft_p99_s", "ttft_samples", "p99_note", "mbu", "cost_per_1m_tokens")
             if c in src.columns("inference")]
    rows = [r for r in src.query(f"SELECT {', '.join([*INFERENCE_COLUMNS, *extra])} FROM inference "
                                 f"WHERE 1=1{src.where_sweep()}")
            if number(r["output_tokens_per_s"]) is not None and number(r["tpot_s"]) is not None]
    if not rows:
        return Skip(key, title, "no inference results with output tokens/s and time per output token")
    notes: list[str] = []
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[key_of(row, ["sweep", "experiment", "model", "site", "system", "device_model", "devices",
                            "precision"])].append(row)
    keys = capped(sorted(groups, key=str), MAX_SERIES, "inference configurations", notes)
    labels = varying_labels([groups[k][0] for k in keys], [
        lambda r: str(r["model"] or ""), system_label, lambda r: f"{r['devices']}dev", lambda r: r["precision"],
        lambda r: r["sweep"], lambda r: r["experiment"]])
    curve, first_token, table_rows = [], [], []
    for k, label in zip(keys, labels):
        points = sorted(groups[k], key=lambda r: number(r["concurrency"]) or 0)
        curve.append(Series(label, [Point(r["output_tokens_per_s"], r["tpot_s"], r["run_id"]) for r in points]))
        first_token.append(Series(label, [Point(r["concurrency"], r["ttft_p50_s"], r["run_id"]) for r in points
                                          if number(r["concurrency"]) is not None and number(r["ttft_p50_s"])]))
        table_rows += [{"run_id": r["run_id"], "configuration": label, "concurrency": r["concurrency"],
                        "output_tokens_per_s": r["output_tokens_per_s"], "tpot_s": r["tpot_s"],
                        "ttft_p50_s": r["ttft_p50_s"], **{c: r[c] for c in extra}} for r in points]
    concurrency = [p.x for s in first_token for p in s.points]
    panels = [Panel("time per output token against throughput", "output tokens/s (all users)",
                    "time per output token (s)", "lines", curve)]
    if concurrency:
        panels.append(Panel("time to first token (p50)", "concurrent users", "time to first token (s)", "lines",
                            first_token, xlog=log_base(concurrency)))
    few = sum(1 for r in table_rows if r.get("p99_note"))
    if few:  # a tail percentile of a few iterations is the slowest of them, not a p99 (issue 27)
        notes.append(f"{few} run(s) with too few timed iterations for their TTFT p99 (or p90): see p99_note")
    return FigureData(key, title, "View inference (study D.3): one point per run, at its number of concurrent "
                      "users, joined in that order; time per output token against total output tokens/s, and the "
                      "median time to first token (prefill).", panels,
                      table(["configuration", "concurrency", "output_tokens_per_s", "tpot_s", "ttft_p50_s", *extra],
                            table_rows, ["concurrency", "output_tokens_per_s", "tpot_s",
                                         *(c for c in ("ttft_samples", "p99_note") if c in extra)]), notes)


# ------------------------------------------------------------------ serving (issue 28)
# Latency against throughput per load level, with the SLO lines: one point per `serving` view row
# (one run at one offered rate or concurrency), joined in the order of the offered load; the runs'
# SLO limits (slo_ttft_s, slo_tpot_s) dashed, so the load where a p99 crosses them is read off.

SERVING_COLUMNS = ["run_id", "sweep", "experiment", "site", "system", "device_model", "devices", "precision", "model",
           "backend", "request_rate", "concurrency", "requests_per_s", "output_tokens_per_s", "ttft_p99_s",
           "tpot_p99_s", "ttft_count", "tpot_count", "goodput_requests_per_s", "slo_ttft_s", "slo_tpot_s"]


def _serving_load(row: dict[str, Any]) -> float:
    return number(row["request_rate"]) or number(row["concurrency"]) or 0.0


def serving(src: Source) -> FigureData | Skip:
    key, title = "serving", "Serving: latency against throughput, with the SLO"
    why = src.missing("serving", SERVING_COLUMNS)
    if why:
        return Skip(key, title, why + " (serving curves need one)")
    # The view pivots every metric value before it filters: ask it only when serving ran.
    if not src.query(f"SELECT run_id FROM results WHERE workload = 'llm_serving'{src.where_sweep()} LIMIT 1"):
        return Skip(key, title, "no serving results")
    rows = [r for r in src.query(f"SELECT {', '.join(SERVING_COLUMNS)} FROM serving WHERE 1=1{src.where_sweep()}")
            if number(r["requests_per_s"]) is not None and number(r["ttft_p99_s"]) is not None]
    if not rows:
        return Skip(key, title, "no serving results with requests/s and a TTFT p99")
    notes: list[str] = []
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[key_of(row, ["sweep", "experiment", "model", "backend", "site", "system", "device_model",
                            "devices", "precision"])].append(row)
    keys = capped(sorted(groups, key=str), MAX_SERIES, "serving configurations", notes)
    labels = varying_labels([groups[k][0] for k in keys], [
        lambda r: str(r["model"] or ""), lambda r: str(r["backend"] or ""), system_label,
        lambda r: f"{r['devices']}dev", lambda r: r["precision"], lambda r: r["sweep"], lambda r: r["experiment"]])
    ttft, tpot, table_rows = [], [], []
    for k, label in zip(keys, labels):
        points = sorted(groups[k], key=_serving_load)
        ttft.append(Series(label, [Point(r["requests_per_s"], r["ttft_p99_s"], r["run_id"]) for r in points]))
        tpot.append(Series(label, [Point(r["output_tokens_per_s"], r["tpot_p99_s"], r["run_id"]) for r in points
                                   if number(r["tpot_p99_s"]) is not None and number(r["output_tokens_per_s"])]))
        table_rows += [{c: r[c] for c in ("run_id", "request_rate", "concurrency", "requests_per_s",
                                          "output_tokens_per_s", "ttft_p99_s", "ttft_count", "tpot_p99_s",
                                          "tpot_count", "goodput_requests_per_s")} | {"configuration": label}
                       for r in points]
    ttft_limits = sorted({v for r in rows if (v := number(r["slo_ttft_s"])) is not None})
    tpot_limits = sorted({v for r in rows if (v := number(r["slo_tpot_s"])) is not None})
    panels = [Panel("time to first token (p99) against throughput", "requests/s (achieved)",
                    "TTFT p99 (s)", "lines", ttft, [RefLine(f"SLO TTFT {v:g} s", y=v) for v in ttft_limits])]
    if any(s.points for s in tpot):
        panels.append(Panel("time per output token (p99) against throughput", "output tokens/s",
                            "TPOT p99 (s)", "lines", tpot, [RefLine(f"SLO TPOT {v:g} s", y=v) for v in tpot_limits]))
    caption = ("View serving (issue 28): one point per run at its offered load (request rate or concurrency), "
               "joined in that order; p99 time to first token against achieved requests/s and p99 time per output "
               "token against output tokens/s (vllm bench serve's definitions); dashed: the runs' SLO limits. "
               "The *_count columns are the samples behind each percentile.")
    return FigureData(key, title, caption, panels,
                      table(["configuration", "request_rate", "concurrency", "requests_per_s", "output_tokens_per_s",
                             "ttft_p99_s", "ttft_count", "tpot_p99_s", "tpot_count", "goodput_requests_per_s"],
                            table_rows, ["request_rate", "requests_per_s", "ttft_p99_s", "tpot_p99_s"]), notes)


QUANTITIES = {"peak_gb": "peak memory (GB)", "step_time_s": "step time (s)", "epoch_time_s": "epoch time (s)"}


def predictions(src: Source) -> FigureData | Skip:
    """Every pair of columns predicted_<x> / measured_<x> of the prediction_error view (e.g. the
    peak memory orch predicted at planning against the measured one), one panel each."""
    key, title = "predictions", "Predicted against measured"
    why = src.missing("prediction_error", ["run_id", "workload"])
    if why:
        return Skip(key, title, why + " (predictions are compared where one exists)")
    columns = src.columns("prediction_error")
    pairs = sorted(c[len("predicted_"):] for c in columns
                   if c.startswith("predicted_") and "measured_" + c[len("predicted_"):] in columns)
    if not pairs:
        return Skip(key, title, "the prediction_error view has no predicted_<x> and measured_<x> columns")
    notes: list[str] = []
    panels, table_rows = [], []
    for quantity in pairs:
        predicted, measured = f"predicted_{quantity}", f"measured_{quantity}"
        if predicted in src.columns("runs") and not src.query(
                f"SELECT id FROM runs WHERE {predicted} IS NOT NULL{src.where_sweep()} LIMIT 1"):
            continue  # nothing predicted at planning: the view (a join per result) need not run
        error = next((c for c in (f"{quantity.rsplit('_', 1)[0]}_error", "memory_error" if "peak" in quantity
                                  else "", f"{quantity}_error") if c and c in columns), None)
        select = ", ".join(["run_id", "workload", "site", predicted, measured] + ([error] if error else []))
        like = ""
        if "peak" in quantity and {"device_type", "peak_tensor_gb"} <= set(columns):
            # Like for like (issue 27): the prediction is a peak of tensor memory; a CPU run that did
            # not report its tensor peak measured its process (RSS), decades apart: not comparable.
            like = " AND (device_type <> 'cpu' OR peak_tensor_gb IS NOT NULL)"
            unlike = src.query(f"SELECT COUNT(*) AS n FROM prediction_error WHERE {predicted} > 0 AND {measured} > 0"
                               f" AND device_type = 'cpu' AND peak_tensor_gb IS NULL{src.where_sweep()}")
            if unlike and unlike[0]["n"]:
                notes.append(f"{unlike[0]['n']} CPU result(s) left out of {quantity}: they measured the process's "
                             "memory (RSS), not the tensor peak the prediction is of")
        rows = sampled(src, select, f"prediction_error WHERE {predicted} > 0 AND {measured} > 0{like}"
                                    f"{src.where_sweep()}", notes)
        if not rows:
            continue
        by_workload: dict[str, list[Point]] = defaultdict(list)
        for row in rows:
            by_workload[row["workload"]].append(Point(row[measured], row[predicted], row["run_id"]))
            table_rows.append({"run_id": row["run_id"], "quantity": quantity, "workload": row["workload"],
                               "measured": row[measured], "predicted": row[predicted],
                               "error": row[error] if error else None})
        values = [v for r in rows for v in (r[measured], r[predicted])]
        low, high = min(values), max(values)
        refs = [RefLine("predicted = measured", xs=[low, high], ys=[low, high], style="-"),
                RefLine("±10%", xs=[low, high], ys=[low * 1.1, high * 1.1], style=":"),
                RefLine("±10%", xs=[low, high], ys=[low * 0.9, high * 0.9], style=":")]
        log = log_base(values, 10)
        shown = capped(sorted(by_workload), MAX_SERIES, f"workloads of {quantity}", notes)
        name = QUANTITIES.get(quantity, quantity.replace("_", " "))
        panels.append(Panel(name, f"measured {name}", f"predicted {name}", "lines",
                            [Series(w, sorted(by_workload[w], key=lambda p: p.x), joined=False) for w in shown],
                            refs, xlog=log, ylog=log))
    if not panels:
        return Skip(key, title, "no result has both a prediction and a measured value")
    return FigureData(key, title, "View prediction_error: what orch predicted when it planned each run against what "
                      "the run measured (e.g. peak memory), one mark per run; on the solid line the prediction is "
                      "exact, dotted lines are 10% off. The table's error is the view's.", panels[:MAX_PANELS],
                      table(["quantity", "workload", "measured", "predicted", "error"], table_rows,
                            ["measured", "predicted", "error"]), notes)


def references(src: Source) -> FigureData | Skip:
    key, title = "references", "Measured over reference figures"
    need = ["run_id", "sweep", "workload", "site", "metric", "measured", "reference", "ratio", "verdict", "source"]
    why = src.missing("reference_check", need)
    if why:
        return Skip(key, title, why)
    notes: list[str] = []
    drawn = [r for r in sampled(src, "*", f"reference_check WHERE ratio IS NOT NULL{src.where_sweep()}", notes)
             if number(r["ratio"]) is not None]
    if not drawn:
        return Skip(key, title, "no result has a reference figure (orch references)")
    name = (lambda r: r.get("reference_name") or f"{r['workload']} {r['metric']}")
    order = sorted({shorten(name(r), 36) for r in drawn})
    order = capped(order, MAX_CATEGORIES, "reference figures", notes)
    by_verdict: dict[str, list[Point]] = defaultdict(list)
    for row in drawn:
        if shorten(name(row), 36) in order:
            by_verdict[row["verdict"] or "-"].append(Point(shorten(name(row), 36), row["ratio"], row["run_id"]))
    series = [Series(v, by_verdict[v], marker={"below": "v", "above": "^"}.get(v, "o"))
              for v in ("below", "within", "above", *sorted(set(by_verdict) - {"below", "within", "above"}))
              if v in by_verdict]
    panel = Panel("measured / reference", "reference figure", "measured / reference", "strip", series,
                  [RefLine("reference", y=1.0, style="-"), RefLine("95% of the reference", y=0.95)],
                  categories=order)
    table_rows = [{"run_id": r["run_id"], "reference": name(r), "metric": r["metric"], "measured": r["measured"],
                   "reference_value": r["reference"], "ratio": r["ratio"], "verdict": r["verdict"],
                   "source": r["source"]} for r in drawn]
    return FigureData(key, title, "View reference_check: each result's measured value of a reference figure's "
                      "metric over the reference (ratio), marked by the view's verdict (below, within or above its "
                      "tolerance); the dashed line is 95% of the reference.", [panel],
                      table(["reference", "metric", "measured", "reference_value", "ratio", "verdict", "source"],
                            table_rows, ["ratio", "measured", "reference_value"]), notes)


# ------------------------------------------------------------------ cost

def cost(src: Source) -> FigureData | Skip:
    key, title = "cost", "Performance per price"
    need = ["run_id", "sweep", "workload", "site", "system", "device_model", "devices", "precision",
            "throughput_metric", "throughput", "tflops_per_device", "throughput_per_price",
            "tflops_per_device_per_price", "price_per_device_hour", "price_currency"]
    why = src.missing("cost", need) or src.missing("runs", ["price_per_device_hour"])
    if why:
        return Skip(key, title, why)
    if not src.query(f"SELECT id FROM runs WHERE price_per_device_hour IS NOT NULL{src.where_sweep()} LIMIT 1"):
        return Skip(key, title, "no site of these results has a price in its profile")  # (the view joins every row)
    notes: list[str] = []
    drawn = sampled(src, ", ".join(need), f"cost WHERE price_per_device_hour IS NOT NULL{src.where_sweep()}", notes)
    if not drawn:
        return Skip(key, title, "no site of these results has a price in its profile")
    by_panel: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in drawn:
        tflops = number(row["tflops_per_device_per_price"]) is not None
        metric = "tflops_per_device_per_price" if tflops else "throughput_per_price"
        if number(row[metric]) is not None:
            by_panel[(row["workload"], metric)].append(row)
    if not by_panel:
        return Skip(key, title, "no priced result reports TFLOP/s or a throughput")
    panels, table_rows = [], []
    for workload, metric in capped(sorted(by_panel), MAX_PANELS, "workloads", notes):
        group = by_panel[(workload, metric)]
        order = sorted({system_label(r) for r in group})
        series: dict[str, list[Point]] = defaultdict(list)
        for row in group:
            series[row["precision"]].append(Point(system_label(row), row[metric], row["run_id"]))
            table_rows.append({"run_id": row["run_id"], "workload": workload, "system": system_label(row),
                               "precision": row["precision"], "devices": row["devices"], "measure": metric,
                               "value": row[metric], "price_per_device_hour": row["price_per_device_hour"],
                               "currency": row["price_currency"]})
        currency = group[0]["price_currency"] or "price"
        ylabel = (f"TFLOP/s per device per {currency}/device-hour" if metric == "tflops_per_device_per_price"
                  else f"{unit(group[0]['throughput_metric'])} per {currency}/hour".replace("/s per", " per"))
        panels.append(Panel(workload, "system", ylabel, "strip", [Series(p, series[p]) for p in sorted(series)],
                            categories=order))
    return FigureData(key, title, "View cost: TFLOP/s per device over the price per device-hour (study D.2), or "
                      "throughput per unit of price where no TFLOP/s is reported; one mark per run.", panels,
                      table(["workload", "system", "precision", "devices", "measure", "value",
                             "price_per_device_hour", "currency"], table_rows, ["value"]), notes)


# ------------------------------------------------------------------ failures

def failures(src: Source) -> FigureData | Skip:
    key, title = "failures", "Failures by class"
    why = src.missing("results", ["run_id", "attempt", "sweep", "experiment", "site", "status", "failure_class",
                                  "exit_code", "job_id"])
    if why:
        return Skip(key, title, why)
    counts = src.query("SELECT failure_class, site, COUNT(*) AS n, MIN(run_id) AS first_run FROM results "
                       f"WHERE status = 'failed'{src.where_sweep()} GROUP BY failure_class, site")
    if not counts:
        return Skip(key, title, "no run failed")
    order = sorted({c["failure_class"] or "unclassified" for c in counts})
    by_site: dict[str, list[Point]] = defaultdict(list)
    for c in counts:
        by_site[c["site"]].append(Point(c["failure_class"] or "unclassified", c["n"], c["first_run"]))
    notes: list[str] = []
    sites = capped(sorted(by_site), MAX_SERIES, "sites", notes)
    rows = src.query("SELECT r.run_id, r.attempt, r.sweep, r.experiment, r.site, r.failure_class, r.exit_code, "
                     "r.job_id, a.reason FROM results r "
                     "LEFT JOIN attempts a ON a.run_id = r.run_id AND a.number = r.attempt "
                     f"WHERE r.status = 'failed'{src.where_sweep('r')} ORDER BY r.failure_class, r.run_id")
    table_rows = [{**r, "reason": shorten(r["reason"] or "", 160)} for r in rows]
    return FigureData(key, title, "View results: failed attempts counted by failure class (SQL COUNT), one colour "
                      "per site; each bar links to the first failed run of its class, the table lists them all.",
                      [Panel("failed attempts", "failure class", "attempts", "bars",
                             [Series(s, by_site[s]) for s in sites], categories=order)],
                      table(["sweep", "experiment", "site", "attempt", "failure_class", "exit_code", "job_id",
                             "reason"], table_rows, ["failure_class"]), notes)


# In the page's order, each with the name of its anchor and files (a Skip says it too).
BUILDERS: dict[str, Builder] = {
    "summary": summary, "throughput": throughput_by_system, "scaling": scaling,
    "scaling-inference": scaling_inference, "strategies": strategies, "seq_len": sequence_length,
    "grad_accum": grad_accumulation, "primitives": primitives, "collectives": collectives, "inference": inference,
    "serving": serving, "loss_curve": loss_curve, "predictions": predictions, "references": references,
    "cost": cost, "failures": failures}
