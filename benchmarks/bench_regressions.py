"""Regression detection on synthetic histories (issue 51): orch's change-point detector beside a
fixed -5% threshold.

    .venv/bin/python benchmarks/bench_regressions.py [--histories 1000] [--seed 51]

Each history is 30-60 epochs of a throughput (true value 100), each epoch the median of 3
repeats with log-normal noise of 1% or 3%. Cases: clean; one step down of 2%, 5% or 10% at a
random epoch (at least 10 epochs in, and at least 6 before the end); clean with one outlier (one
epoch 30% slow: a slow node). Printed per case:

- false alarms: share of clean (or outlier) histories where the detector reports any change
  (orch: any change point over the whole history; threshold: any epoch below 95% of the stored
  reference value, 100);
- detected: share of stepped histories where, over the whole history, a downward change is
  reported within 2 epochs of the step (threshold: any epoch at or after the step flagged);
- delay: the detector run each epoch as the history grows (as a nightly job does), the epochs
  after the first slow one until it first reports the step (0: found the night of the first slow
  epoch, 3: the night of the third epoch after it, four slow epochs in): median, and the share
  found within 3 epochs (delay <= 3). A step not found 6 epochs after it counts as missed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from orchestrator.results.regressions.detect import change_points

REPEATS = 3
REFERENCE = 100.0
THRESHOLD = 0.95  # a fixed -5% threshold against the stored reference (ReFrame, llmb-run style)
NEAR = 2  # epochs: a change point this close to the step is the step


def history(rng: np.random.Generator, noise: float, step: float = 0.0,
            outlier: bool = False) -> tuple[list[float], int]:
    n = int(rng.integers(30, 61))
    at = int(rng.integers(10, n - 5)) if step else -1
    level = np.full(n, REFERENCE)
    if step:
        level[at:] *= 1.0 - step
    repeats = level[:, None] * np.exp(rng.normal(0.0, noise, size=(n, REPEATS)))
    points = np.median(repeats, axis=1)
    if outlier:
        points[int(rng.integers(0, n))] *= 0.7
    return points.tolist(), at


def orch_found(points: list[float], at: int) -> bool:
    return any(abs(c.index - at) <= NEAR and c.magnitude < 0 for c in change_points(points))


def orch_delay(points: list[float], at: int) -> int | None:
    for delay in range(0, min(len(points) - at - 1, 6) + 1):
        if orch_found(points[:at + delay + 1], at):
            return delay
    return None


def threshold_delay(points: list[float], at: int) -> int | None:
    for i in range(at, len(points)):
        if points[i] < THRESHOLD * REFERENCE:
            return i - at
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=51)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"{args.histories} histories per case, 30-60 epochs, each the median of {REPEATS} repeats")
    print(f"{'case':<22} {'orch false alarms':>18} {'-5% false alarms':>17}")
    for noise in (0.01, 0.03):
        for outlier in (False, True):
            cases = [history(rng, noise, outlier=outlier) for _ in range(args.histories)]
            orch = sum(bool(change_points(p)) for p, _ in cases) / len(cases)
            fixed = sum(min(p) < THRESHOLD * REFERENCE for p, _ in cases) / len(cases)
            name = f"clean {noise:.0%} noise" + (" + outlier" if outlier else "")
            print(f"{name:<22} {orch:>18.1%} {fixed:>17.1%}")
    print(f"\n{'case':<22} {'orch detected':>14} {'median delay':>13} {'<= 3 epochs':>12} "
          f"{'-5% detected':>13} {'median delay':>13} {'<= 3 epochs':>12}")
    for noise in (0.01, 0.03):
        for step in (0.02, 0.05, 0.10):
            cases = [history(rng, noise, step=step) for _ in range(args.histories)]
            found = sum(orch_found(p, at) for p, at in cases) / len(cases)
            delays = [orch_delay(p, at) for p, at in cases]
            fixed_delays = [threshold_delay(p, at) for p, at in cases]
            row = [f"{found:.1%}", _median(delays), f"{sum(d is not None and d <= 3 for d in delays) / len(cases):.1%}",
                   f"{sum(d is not None for d in fixed_delays) / len(cases):.1%}", _median(fixed_delays),
                   f"{sum(d is not None and d <= 3 for d in fixed_delays) / len(cases):.1%}"]
            name = f"step -{step:.0%}, {noise:.0%} noise"
            print(f"{name:<22} {row[0]:>14} {row[1]:>13} {row[2]:>12} {row[3]:>13} {row[4]:>13} {row[5]:>12}")
    print(f"\n{time.perf_counter() - started:.0f} s")


def _median(delays: list[int | None]) -> str:
    found = [d for d in delays if d is not None]
    return f"{statistics.median(found):g}" if found else "-"


if __name__ == "__main__":
    main()
