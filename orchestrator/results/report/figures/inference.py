"""Inference and serving: latency against throughput (views inference and serving)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from orchestrator.results.report.figures.common import capped, log_base, table, varying_labels
from orchestrator.results.report.model import (
    MAX_SERIES,
    FigureData,
    Panel,
    Point,
    RefLine,
    Series,
    Skip,
)
from orchestrator.results.report.source import Source, key_of, number, system_label

# ------------------------------------------------------------------ inference

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
