"""The throughput figures, from the views repeat_spread and scaling: the summary, bars per
system and precision, scaling curves, and throughput against one swept axis."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from orchestrator.results.report.figures.common import (
    SCALING_KEYS,
    SPREAD_KEYS,
    capped,
    coarser,
    first_runs,
    log_base,
    natural,
    table,
    unit,
    varying_labels,
)
from orchestrator.results.report.model import (
    MAX_CATEGORIES,
    MAX_PANELS,
    MAX_SERIES,
    FigureData,
    Panel,
    Point,
    RefLine,
    Series,
    Skip,
)
from orchestrator.results.report.source import Source, config_label, key_of, number, params_of, system_label

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
