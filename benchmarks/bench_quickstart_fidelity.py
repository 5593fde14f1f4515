"""Quickstart fidelity: orch's GEMM figures on the local site over a bare ``torch.matmul`` loop.

Runs the quickstart sweep through ``orch run --site local`` (in a temporary ORCH_HOME),
then, in the same invocation, for every row a bare loop of the same shape, precision,
process count and threads per process (read from the run's metrics file), while this
script holds every core in the machine-wide ledger (no local orch run of anyone starts
meanwhile). Prints, per row, orch's TFLOP/s over the bare loop's. Goal: 0.90-1.10.

The bare figure is total work over total time (``processes * iters * 2MNK`` over the
slowest process's timed loop), the median of ``--repeats`` loops. Beside it the table
sets the workload's median-step figure (``tflops_median``, where it reports one) against
the bare loop by the same definition (sum over processes of ``2MNK / median step``), so a
gap that comes from a definition of TFLOP/s, not from contention, shows as such.

    python benchmarks/bench_quickstart_fidelity.py [--sweep examples/quickstart.yaml] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.executors.local_cores import CoreLedger, usable_cores  # noqa: E402

# One process of the bare loop: pinned to the run's cores, the run's threads, the same
# operands as workloads.gemm (seeded generator, out= product), per-step timestamps.
WORKER = r"""
import json, os, statistics, sys, time
import multiprocessing as mp

def rank(r, a, barrier, queue):
    import torch
    os.sched_setaffinity(0, a["cores"])
    torch.set_num_threads(a["threads"])
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a["precision"]]
    gen = torch.Generator(device="cpu").manual_seed(1234 + r)
    x = torch.randn(a["m"], a["k"], generator=gen).to(dtype)
    y = torch.randn(a["k"], a["n"], generator=gen).to(dtype)
    z = torch.empty(a["m"], a["n"], dtype=dtype)
    loops = []
    for _ in range(a["repeats"]):
        for _ in range(a["warmup"]):
            torch.matmul(x, y, out=z)
        barrier.wait()
        marks = [time.perf_counter()]
        for _ in range(a["iters"]):
            torch.matmul(x, y, out=z)
            marks.append(time.perf_counter())
        loops.append([b - c for c, b in zip(marks, marks[1:])])
    queue.put((r, loops))

if __name__ == "__main__":
    a = json.loads(sys.argv[1])
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(a["processes"]), ctx.Queue()
    procs = [ctx.Process(target=rank, args=(r, a, barrier, queue)) for r in range(a["processes"])]
    for p in procs:
        p.start()
    out = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    print(json.dumps([out[r] for r in range(a["processes"])]))
"""


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def orch(*args: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"orch {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def bare(m: int, n: int, k: int, precision: str, processes: int, threads: int, cores: list[int],
         warmup: int, iters: int, repeats: int) -> tuple[float, float]:
    """(work/time TFLOP/s, median-step TFLOP/s) of the bare loop: medians over the repeats."""
    args = dict(m=m, n=n, k=k, precision=precision, processes=processes, threads=threads, cores=cores,
                warmup=warmup, iters=iters, repeats=repeats)
    env = {**os.environ, **{v: str(threads) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
    with tempfile.TemporaryDirectory() as tmp:  # a file: spawned processes re-import __main__ from it
        worker = Path(tmp) / "bare_gemm.py"
        worker.write_text(WORKER)
        proc = subprocess.run([sys.executable, str(worker), json.dumps(args)], env=env, capture_output=True,
                              text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"bare loop failed ({args}):\n{proc.stderr}")
    out = proc.stdout
    per_rank = json.loads(out)  # [rank][repeat][step]
    flops = 2.0 * m * n * k
    work_time, median_rate = [], []
    for rep in range(repeats):
        loops = [per_rank[r][rep] for r in range(processes)]
        work_time.append(processes * iters * flops / max(sum(steps) for steps in loops) / 1e12)
        median_rate.append(sum(flops / statistics.median(steps) for steps in loops) / 1e12)
    return statistics.median(work_time), statistics.median(median_rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default=str(REPO / "examples" / "quickstart.yaml"))
    parser.add_argument("--repeats", type=int, default=5, help="bare loops per row (median taken)")
    opts = parser.parse_args()

    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; before: {uptime()}")
    home = Path(tempfile.mkdtemp(prefix="orch-fidelity-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_") or k == "ORCH_LOCAL_CORES_DIR"}
    env["ORCH_HOME"] = str(home)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", opts.sweep, "--site", "local", "--json"],
                   cwd=REPO, env=env, capture_output=True, text=True)
    orch_s = time.monotonic() - started
    rows = json.loads(orch("sql", "-f", "json",
                           "SELECT s.run_id, s.devices, s.precision, s.params, s.tflops, s.status, r.run_dir "
                           "FROM results s JOIN runs r ON r.id = s.run_id ORDER BY s.devices, s.precision, s.run_id",
                           env=env))
    print(f"# orch run: {len(rows)} rows in {orch_s:.0f} s (ORCH_HOME={home}); after: {uptime()}")

    # The bare loops, alone: hold every core of the machine-wide ledger meanwhile.
    cores = usable_cores()
    ledger = CoreLedger()
    grant = ledger.acquire(len(cores), len(cores), job="bench_quickstart_fidelity")
    assert grant is not None
    results = []
    try:
        print(f"# bare loops hold cores {grant.cores} (waited {grant.waited_s:.0f} s); {uptime()}")
        for row in rows:
            params = json.loads(row["params"])
            m, n, k = int(params["m"]), int(params["n"]), int(params["k"])
            if row["status"] != "completed":
                results.append((row, m, n, k, None, None, None, None, None))
                continue
            doc = json.loads((Path(row["run_dir"]) / "metrics.json").read_text())
            figures = doc["metrics"]
            threads, run_cores = int(figures["threads"]), int(figures["cores"])
            bare_wt, bare_med = bare(m, n, k, row["precision"], int(row["devices"]), threads, cores[:run_cores],
                                     int(params["warmup"]), int(params["iters"]), opts.repeats)
            # The workload's median-step figure, where it reports one beside tflops.
            orch_med = figures.get("tflops_median")
            results.append((row, m, n, k, run_cores, threads, orch_med, bare_wt, bare_med))
    finally:
        ledger.release()
    print(f"# after the bare loops: {uptime()}")
    print()
    print("| precision | procs | M x N x K | cores | threads/proc | orch `tflops` | bare work/time "
          "| **orch / bare** | orch `tflops_median` | bare median-step | median / median |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row, m, n, k, run_cores, threads, orch_med, bare_wt, bare_med in results:
        if bare_wt is None:
            print(f"| {row['precision']} | {row['devices']} | {m}x{n}x{k} | | | {row['status']} | | | | | |")
            continue
        ratio = row["tflops"] / bare_wt
        medians = f"| {orch_med:.4f} | {bare_med:.4f} | {orch_med / bare_med:.2f} |" if orch_med else \
            f"| | {bare_med:.4f} | |"
        print(f"| {row['precision']} | {row['devices']} | {m}x{n}x{k} | {run_cores} | {threads} "
              f"| {row['tflops']:.4f} | {bare_wt:.4f} | **{ratio:.2f}**{'' if 0.9 <= ratio <= 1.1 else ' (out)'} "
              + medians)


if __name__ == "__main__":
    main()
