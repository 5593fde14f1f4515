"""Serving figures from the load generator's per-request records (pure Python, no torch).

Definitions (those of ``vllm bench serve``, which GuideLLM and AIPerf share; db/glossary_metrics.yaml):
- TTFT: send to the first content chunk, per successful request.
- ITL: the gap between consecutive content chunks, pooled over every successful request (for a
  record that kept only its first and last token's times, GuideLLM's: their mean gap, once).
- TPOT: per request, (end-to-end - TTFT) / (output tokens - 1); requests of one token have none.
- end-to-end (e2e): send to the last byte of the response.
- Percentiles p50/p90/p99 are linear-interpolated (numpy's default); ``*_count`` is the number
  of samples behind them.
- ``output_tokens_per_s`` = output tokens of the successful requests / duration;
  ``requests_per_s`` = successful requests / duration; duration = first send to last end.
- Goodput: successful requests meeting every SLO (TTFT <= slo_ttft_s and TPOT <= slo_tpot_s)
  per second of the duration; ``goodput_fraction`` = those / successful requests.
  ``slo_met`` (1/0): MLPerf's run-level test, p99 TTFT and p99 TPOT within their limits.

SLO presets (MLPerf Inference v4/v5, Llama-2-70B): ``mlperf-llama2-70b-server`` TTFT p99
<= 2 s, TPOT p99 <= 200 ms; ``mlperf-llama2-70b-interactive`` 450 ms and 40 ms. Or
``ttft=SECONDS,tpot=SECONDS`` (either may be left out), or ``none``.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from workloads.harness import timing
from workloads.serving.spec import SLO_PRESETS, parse_slo

__all__ = ["SLO_PRESETS", "compute", "parse_slo", "percentile", "request_tpot"]


def percentile(values: list[float], q: float) -> float | None:
    """The harness's linear-interpolated percentile (numpy's default), None without samples."""
    return timing.percentile(values, q) if values else None


def _spread(prefix: str, values: list[float], mean_name: str | None = None) -> dict[str, Any]:
    return {
        f"{prefix}_p50_s": percentile(values, 50),
        f"{prefix}_p90_s": percentile(values, 90),
        f"{prefix}_p99_s": percentile(values, 99),
        mean_name or f"{prefix}_mean_s": math.fsum(values) / len(values) if values else None,
        f"{prefix}_count": len(values),
    }


def request_tpot(record: Mapping[str, Any]) -> float | None:
    tokens = int(record["output_tokens"])
    if tokens < 2 or not record["chunk_s"]:
        return None
    return (float(record["latency_s"]) - float(record["chunk_s"][0])) / (tokens - 1)


def _gaps(record: Mapping[str, Any]) -> list[float]:
    """The record's inter-token gaps: each chunk's from the last, or, where only the first and
    last token's times were kept (``chunks: first_last``), their mean, once per request (GuideLLM's ITL)."""
    chunk_s = record["chunk_s"]
    if record.get("chunks", "all") == "first_last":
        tokens = int(record["output_tokens"])
        return [(chunk_s[-1] - chunk_s[0]) / (tokens - 1)] if tokens > 1 and len(chunk_s) > 1 else []
    return [b - a for a, b in zip(chunk_s, chunk_s[1:])]


def compute(records: Iterable[Mapping[str, Any]], duration_s: float, slo: Mapping[str, float]) -> dict[str, Any]:
    """The serving figures of one load level from its records (dicts as in requests.jsonl)."""
    records = list(records)
    good = [r for r in records if r["ok"]]
    ttft = [float(r["chunk_s"][0]) for r in good]
    itl = [gap for r in good for gap in _gaps(r)]
    tpot_by_request = [request_tpot(r) for r in good]
    tpot = [t for t in tpot_by_request if t is not None]
    e2e = [float(r["latency_s"]) for r in good]
    out_tokens = sum(int(r["output_tokens"]) for r in good)
    in_tokens = sum(int(r["input_tokens"]) for r in good)
    figures: dict[str, Any] = {}
    figures.update(_spread("ttft", ttft))
    figures.update(_spread("itl", itl))
    figures.update(_spread("tpot", tpot, mean_name="tpot_s"))
    figures.update(_spread("e2e", e2e))
    figures.update({
        "requests_completed": len(good),
        "requests_failed": len(records) - len(good),
        "duration_s": duration_s,
        "output_tokens_per_s": out_tokens / duration_s if duration_s > 0 else None,
        "input_tokens_per_s": in_tokens / duration_s if duration_s > 0 else None,
        "requests_per_s": len(good) / duration_s if duration_s > 0 else None,
    })
    figures["tokens_per_s"] = figures["output_tokens_per_s"]  # the headline rate of every workload
    ttft_limit, tpot_limit = slo.get("ttft"), slo.get("tpot")
    figures["slo_ttft_s"], figures["slo_tpot_s"] = ttft_limit, tpot_limit
    if slo:
        meeting = sum(1 for r, t in zip(good, tpot_by_request)
                      if (ttft_limit is None or float(r["chunk_s"][0]) <= ttft_limit)
                      and (tpot_limit is None or t is None or t <= tpot_limit))
        figures["goodput_requests_per_s"] = meeting / duration_s if duration_s > 0 else None
        figures["goodput_fraction"] = meeting / len(good) if good else None
        p99_ttft, p99_tpot = figures["ttft_p99_s"], figures["tpot_p99_s"]
        met = bool(good) and (ttft_limit is None or (p99_ttft is not None and p99_ttft <= ttft_limit)) \
            and (tpot_limit is None or p99_tpot is None or p99_tpot <= tpot_limit)
        figures["slo_met"] = int(met)
    return figures
