"""What the two validations against published figures share (benchmarks/validate_published.py, step
time; benchmarks/validate_memory.py, peaks): the fit's search, the error summary, the command line."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, Callable, Sequence


def print_tail(report: dict[str, Any]) -> None:
    """Every excluded entry with its reason, the factors beside their priors, each half's errors."""
    for i in report["excluded"]:
        print(f"excluded {i['id']}: {i['reason']}")
    print("factors:", report["factors"], " priors:", report["priors"])
    for half in ("fit", "held_out", "blind", "plan"):
        if half not in report:
            continue  # "blind", "plan": the memory script's entries added after the model was frozen, and
            # its traced predictions of orch's own program
        s = report[half]
        print(f"{half}: n={s['n']} mean |err| {s['mean_abs_pct']:.1f}%  max |err| {s['max_abs_pct']:.1f}%")


def main(argv: list[str] | None, description: str, run: Callable[[bool], dict[str, Any]],
         print_rows: Callable[[list[dict[str, Any]]], None]) -> int:
    """A validation script's command line: ``--json`` (the report) or its table and tail; ``--no-fit``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-fit", action="store_true", help="the priors (defaults) only, no fit")
    args = parser.parse_args(argv)
    report = run(not args.no_fit)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print_rows(report["entries"])
    print_tail(report)
    return 0


def descend(loss: Callable[[dict[str, float]], float], factors: dict[str, float],
            allowed: Callable[[str, float], bool], stop: float) -> dict[str, float]:
    """Coordinate descent from ``factors``: each factor times or over a step (1.5, square-rooted when
    nothing improves, until below ``stop``), a trial kept where ``allowed`` and ``loss`` falls."""
    best, step = loss(factors), 1.5
    while step > stop:
        improved = False
        for k in sorted(factors):
            for mult in (step, 1 / step):
                trial = dict(factors, **{k: factors[k] * mult})
                if not allowed(k, trial[k]):
                    continue
                value = loss(trial)
                if value < best - 1e-12:
                    factors, best, improved = trial, value, True
        if not improved:
            step = math.sqrt(step)
    return factors


def summary(errors: Sequence[float]) -> dict[str, float]:
    """Count, mean and max of the absolute relative ``errors``, in percent."""
    abs_err = [abs(e) for e in errors]
    return {"n": len(abs_err), "mean_abs_pct": 100 * sum(abs_err) / len(abs_err), "max_abs_pct": 100 * max(abs_err)}
