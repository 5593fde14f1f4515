"""The adapters' shared part: orch's definitions applied to what a vendor tool printed.

Standard library only (adapters run in the vendor's environment), with the workloads' own
metrics writer (:mod:`workloads.harness.metrics`, no torch): the document is ``orch.metrics/1``
with the same time stamps, number cleaning and atomic write; the tests validate every adapter's file with
:class:`orchestrator.results.metrics_schema.MetricsFile`.

Definitions (the same as every orch workload, ``workloads/harness/timing.py``):

- ``samples_per_s`` = samples of the timed steps / total timed time; ``tokens_per_s`` the same
  in tokens (samples x sequence length) for language models;
- the timed steps exclude the warm-up steps (the first, which on these systems also pays for
  loading the compiled program);
- ``step_time_s`` = the median (p50) of the per-step (or per-interval) times the tool printed,
  as every orch workload reports it; ``step_time_p90_s`` / ``std`` over the same times, and
  ``timed_time_s`` their sum.

A vendor's own figure that means something else (a smoothed rate, a mean of rates, a time
that includes the warm-up) is kept beside ours under a ``vendor_`` name and explained in the
document's ``vendor`` block.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from typing import Any, Callable, Sequence

from workloads.harness.metrics import SCHEMA, clean_metrics, utc_now, write_atomic

EXIT_NO_FIGURES = 3  # the log holds none of the lines the adapter reads


class AdapterError(Exception):
    """The vendor's output does not hold what the adapter needs (said in one line)."""


def common_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    parser.add_argument("--from", dest="source", required=True, metavar="LOG",
                        help="the file the vendor tool's output was captured into")
    parser.add_argument("--output", required=True, metavar="PATH", help="metrics JSON to write (orch.metrics/1)")
    parser.add_argument("--workload", required=True, help="orch workload the run stands for")
    parser.add_argument("--precision", required=True)
    parser.add_argument("--devices", type=int, default=1, help="accelerators the run used")
    parser.add_argument("--warmup", type=int, default=1, help="steps (or printed intervals) not timed")
    parser.add_argument("--seq-len", type=int, default=0, help="tokens per sample (language models)")
    parser.add_argument("--device-model", default="", help="device model, for the metrics file")
    parser.add_argument("--peak-tflops", type=float, default=None, help="unused: no FLOP count here")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a run parameter to record in the metrics file (repeatable)")
    return parser


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default), as the harness reports it."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def step_figures(step_times: Sequence[float], samples_per_step: float, tokens_per_sample: int = 0
                 ) -> dict[str, float | None]:
    """orch's throughput and step-time figures from timed per-step seconds."""
    total = float(sum(step_times))
    if not step_times or total <= 0:
        raise AdapterError("no timed steps (every printed step was a warm-up step)")
    samples = samples_per_step * len(step_times)
    figures: dict[str, float | None] = {
        "samples_per_s": samples / total,
        "step_time_s": percentile(step_times, 50),
        "step_time_p50_s": percentile(step_times, 50),
        "step_time_p90_s": percentile(step_times, 90),
        "step_time_std_s": statistics.stdev(step_times) if len(step_times) > 1 else 0.0,  # sample std, as summarize
        "timed_time_s": total,
        "timed_samples": samples,
    }
    if tokens_per_sample:
        figures["tokens_per_s"] = samples * tokens_per_sample / total
    return figures


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        name, _, text = item.partition("=")
        try:
            out[name] = json.loads(text)
        except ValueError:
            out[name] = text
    return out


def document(*, args: argparse.Namespace, device_type: str, metrics: dict[str, Any], warmup_steps: int,
             step_times: Sequence[float], vendor: dict[str, Any], params: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "workload": args.workload,
        "status": "ok",
        "params": {**parse_params(args.param), **(params or {})},
        "precision": args.precision,
        "world_size": max(1, int(args.devices)),
        "device": {"type": device_type, "model": args.device_model or device_type, "count": max(1, int(args.devices))},
        "metrics": clean_metrics(metrics),
        "timing": {"warmup_steps": int(warmup_steps), "timed_steps": max(1, len(step_times)),
                   "step_times_s": [float(t) for t in step_times]},
        "env": {"hostname": os.uname().nodename, "python": sys.version.split()[0]},
        "started_at": None,
        "finished_at": utc_now(),
        "vendor": vendor,
    }


def convert(argv: Sequence[str] | None, parser: argparse.ArgumentParser,
            to_document: Callable[[argparse.Namespace, str], dict[str, Any]]) -> int:
    """An adapter's run: the tool's output (``--from``) to orch's metrics file (``--output``). A log
    without the figures, or a file that cannot be read or written, is one line on stderr and exit code 3."""
    try:
        args = parser.parse_args(argv)
        with open(args.source, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        write_atomic(args.output, to_document(args, text))
    except (AdapterError, OSError) as exc:
        print(f"orch adapter: {exc}", file=sys.stderr)
        return EXIT_NO_FIGURES
    return 0
