"""Harness overhead: the GEMM timed through the workload harness vs a bare timed loop (CPU or GPU).

The bare loop is what one would write by hand: ``perf_counter`` around N
products. The harness path is the real one, ``Session.time_steps`` with the
GEMM workload's own step (per-step timestamps, device synchronisation hooks).
Rounds interleave the two (bare then harness, harness then bare, ...) so drifts of clock
and load hit both alike; the headline is the median over rounds of the paired ratio
(harness / bare within one round); the ratio of the fastest rounds is shown too. Goal: <= 2% overhead.
On a GPU the bare loop is ``torch.matmul`` queued back to back with one synchronisation at each end,
the fastest a hand-written loop can time it; the harness times each step with CUDA events.

    python benchmarks/bench_harness_overhead.py [--sizes 64,256] [--iters 100] [--rounds 41]
    python benchmarks/bench_harness_overhead.py --device cuda --precision bf16 --sizes 4096,8192 --iters 50 --rounds 11
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from workloads.gemm import make_step  # noqa: E402
from workloads.harness import Session  # noqa: E402


def bare_loop(step: Callable[[], object], iters: int, sync: Callable[[], None]) -> float:
    sync()  # a GPU starts idle, as the harness's timed region does
    start = time.perf_counter()
    for _ in range(iters):
        step()
    sync()
    return time.perf_counter() - start


def measure(size: int, iters: int, rounds: int, device: str, precision: str) -> dict[str, float]:
    session = Session("gemm", ["--device", device, "--precision", precision, "--size-m", str(size),
                               "--size-n", str(size), "--size-k", str(size), "--warmup", "0", "--iters", str(iters)])
    sync = session.device.synchronize
    step = make_step(session, size, size, size)
    for _ in range(max(5, iters // 10)):  # warm caches and the thread pool
        step()
    bare, harness, reported = [], [], []
    def through_harness() -> None:
        start = time.perf_counter()
        times = session.time_steps(step, warmup=0, iters=iters)
        harness.append(time.perf_counter() - start)
        reported.append(sum(times))

    for i in range(rounds):
        # Alternate which goes first, so neither always inherits the other's cache state.
        if i % 2:
            through_harness()
            bare.append(bare_loop(step, iters, sync))
        else:
            bare.append(bare_loop(step, iters, sync))
            through_harness()
    session.close()
    b, h, r = statistics.median(bare), statistics.median(harness), statistics.median(reported)
    # Paired: each round's harness time over the same round's bare time, then the median, so
    # load that drifts between rounds (this machine is shared) cancels within each pair.
    paired = statistics.median(hh / bb for hh, bb in zip(harness, bare))
    return {"size": size, "bare_s": b, "harness_s": h, "reported_s": r, "paired_ratio": paired,
            "min_ratio": min(harness) / min(bare), "reported_ratio": r / b, "per_step_us": b / iters * 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64,256", help="square GEMM sizes, comma-separated")
    parser.add_argument("--iters", type=int, default=100, help="GEMMs per timed loop")
    parser.add_argument("--rounds", type=int, default=41, help="interleaved bare/harness rounds")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: less noise)")
    parser.add_argument("--goal", type=float, default=0.02, help="overhead goal as a fraction")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the largest size misses the goal")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (the harness's --device)")
    parser.add_argument("--precision", default="fp32", help="fp32, tf32, bf16, fp16, fp8 (the gemm's --precision)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{os.cpu_count()} cpus"
    print(f"torch {torch.__version__}, {args.device} ({where}), {args.precision}, {args.threads} thread(s), "
          f"{args.iters} GEMMs x {args.rounds} interleaved rounds (medians)")
    print(f"{'size':>6} {'per GEMM':>10} {'bare s':>9} {'harness s':>10} {'paired ratio':>13} "
          f"{'min ratio':>10} {'reported/bare':>14}")
    results = [measure(int(s), args.iters, args.rounds, args.device, args.precision) for s in args.sizes.split(",")]
    for r in results:
        tflops = 2 * r["size"] ** 3 / (r["per_step_us"] * 1e-6) / 1e12
        print(f"{r['size']:>6} {r['per_step_us']:>8.1f}us {r['bare_s']:>9.4f} {r['harness_s']:>10.4f} "
              f"{r['paired_ratio']:>13.4f} {r['min_ratio']:>10.4f} {r['reported_ratio']:>14.4f}"
              f"  bare {tflops:.3g} TFLOP/s")
    worst = results[-1]["paired_ratio"] - 1
    verdict = "meets" if worst <= args.goal else "misses"
    print(f"overhead at size {results[-1]['size']}: {worst * 100:+.2f}% ({verdict} the {args.goal * 100:.0f}% goal)")
    return 1 if args.strict and worst > args.goal else 0


if __name__ == "__main__":
    raise SystemExit(main())
