"""Figures with one mark per run of a study's workloads: strategies (memory and time),
primitives against the peak, collective bandwidth."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from orchestrator.results.report.figures.common import capped, log_base, per_attempt, sampled, table, varying_labels
from orchestrator.results.report.model import (
    MAX_PANELS,
    MAX_SERIES,
    FigureData,
    Panel,
    Point,
    RefLine,
    Series,
    Skip,
)
from orchestrator.results.report.source import Source, config_label, number, params_of, system_label
from orchestrator.states import AttemptState, FailureClass

# Study C.1's DL primitives (workloads/primitives.py, gemm.py).
PRIMITIVES = ("gemm", "conv2d", "relu", "lstm")


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
