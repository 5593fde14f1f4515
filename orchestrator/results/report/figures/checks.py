"""Figures that check results: predicted against measured, measured over reference figures,
performance per price, failures by class."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from orchestrator.results.report.figures.common import capped, log_base, sampled, table, unit
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
from orchestrator.results.report.source import Source, number, shorten, system_label

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
