"""The step clock's cost on a GPU: short GEMMs timed by device events made ahead of the timed region
(``StepClock.start(laps)``), made in it (``start()``, a loop of unknown length), and by a bare loop.

    python benchmarks/bench_step_clock.py [--sizes 1024,2048,4096] [--iters 100] [--rounds 21]

Each figure is the median over interleaved rounds of the mean step (events: the sum of the clock's
times over the steps; bare: ``perf_counter`` around the loop, synchronised at both ends). Where the
host's cost per step exceeds the kernel's, the clock's steps read longer than the bare loop's.
Needs CUDA (or XPU); on a CPU there are no device events and nothing to compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from workloads.harness.device import Device  # noqa: E402
from workloads.harness.timing import StepClock  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1024,2048,4096", help="square bf16 GEMM sizes, comma-separated")
    parser.add_argument("--iters", type=int, default=100, help="GEMMs per timed loop")
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_step_clock: no CUDA device here (device events are what it measures)", file=sys.stderr)
        return 2
    device = Device("cuda", torch.device("cuda"), torch.cuda.get_device_name(), torch.cuda.device_count())
    print(f"torch {torch.__version__}, {device.model}, bf16, {args.iters} GEMMs x {args.rounds} rounds (medians)")
    print(f"{'size':>6} {'bare':>10} {'made ahead':>11} {'made in loop':>13} {'ahead/bare':>11} {'in loop/bare':>13}")
    for size in (int(s) for s in args.sizes.split(",")):
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b, c = torch.randn_like(a), torch.empty_like(a)
        for _ in range(20):
            torch.matmul(a, b, out=c)
        steps: dict[str, list[float]] = {"bare": [], "ahead": [], "in loop": []}
        for _ in range(args.rounds):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.iters):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
            steps["bare"].append((time.perf_counter() - start) / args.iters)
            for mode, laps in (("ahead", args.iters), ("in loop", 0)):
                clock = StepClock(device)
                clock.start(laps)
                for _ in range(args.iters):
                    torch.matmul(a, b, out=c)
                    clock.lap()
                steps[mode].append(sum(clock.times()) / args.iters)
        m = {mode: statistics.median(v) for mode, v in steps.items()}
        print(f"{size:>6} {m['bare'] * 1e6:>8.2f}us {m['ahead'] * 1e6:>9.2f}us {m['in loop'] * 1e6:>11.2f}us "
              f"{m['ahead'] / m['bare']:>11.3f} {m['in loop'] / m['bare']:>13.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
