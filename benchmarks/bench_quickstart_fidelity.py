"""Quickstart fidelity: orch's GEMM figures on the local site over a bare ``torch.matmul`` loop.

Runs the quickstart sweep through ``orch run --site local`` (in a temporary ORCH_HOME),
then, in the same invocation, for every row a bare loop of the same shape, precision,
process count and threads per process (read from the run's metrics file), while this
script holds every core in the machine-wide ledger (no local orch run of anyone starts
meanwhile). Prints, per row, orch's TFLOP/s over the bare loop's. Goal: 0.90-1.10.

``--rounds R`` (default 5) repeats (orch run, then the bare loops) R times and compares the
medians over the rounds: this VM's speed drifts by 10-20% over minutes (seen in the bare
loops alone), and a single orch sample against a single bare sample taken a minute later
measures the drift, not orch. So each orch run is bracketed: its bare figure is the mean of
the bare loops measured just before it and just after it (the after-loops of one round are
the before-loops of the next; a first, uncounted orch run gives the first before-loops their
step counts and warms the page cache), which cancels a drift that is steady over the two
minutes. Each round's ratio is printed beside the median's.

The bare figure is total work over total time (``processes * iters * 2MNK`` over the
slowest process's timed loop), the median of ``--repeats`` loops. Beside it the table
sets the workload's median-step figure (``tflops_median``, where it reports one) against
the bare loop by the same definition (sum over processes of ``2MNK / median step``), so a
gap that comes from a definition of TFLOP/s, not from contention, shows as such.

Each round's lines print the hypervisor's steal time (/proc/stat) over the orch run and over
the bare loops: on this VM it is several percent on average and comes in bursts, which a
1-process run on both cores (2 threads) feels whole.

    python benchmarks/bench_quickstart_fidelity.py [--sweep examples/quickstart.yaml] [--repeats 5] [--rounds 5]
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.run.executors.local_cores import CoreLedger, usable_cores  # noqa: E402

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


def cpu_ticks() -> list[int]:
    """The machine's CPU time counters (/proc/stat's first line: user nice system idle iowait
    irq softirq steal ...), in clock ticks."""
    return [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]


def steal(since: list[int]) -> str:
    """Share of CPU time the hypervisor gave to other guests since ``since``: time this VM's
    runs wanted and did not get, which neither orch nor the bare loop can control."""
    now = cpu_ticks()
    delta = [b - a for a, b in zip(since, now)]
    total = sum(delta[:8]) or 1
    return f"steal {100 * delta[7] / total:.1f}% of CPU time"


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


@dataclass
class Row:
    """One quickstart configuration, its orch figures and bare figures over the rounds."""

    precision: str
    devices: int
    m: int
    n: int
    k: int
    cores: int = 0
    threads: int = 0
    steps: list[int] = field(default_factory=list)
    orch: list[float] = field(default_factory=list)
    orch_median: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    bare_median: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def orch_round(sweep: str) -> tuple[list[dict[str, Any]], float, Path]:
    """One ``orch run`` of the sweep in a fresh ORCH_HOME: its result rows and its wall time."""
    home = Path(tempfile.mkdtemp(prefix="orch-fidelity-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_") or k == "ORCH_LOCAL_CORES_DIR"}
    env["ORCH_HOME"] = str(home)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", sweep, "--site", "local", "--json"],
                   cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    rows = json.loads(orch("sql", "-f", "json",
                           "SELECT s.run_id, s.devices, s.precision, s.params, s.tflops, s.status, r.run_dir "
                           "FROM results s JOIN runs r ON r.id = s.run_id ORDER BY s.devices, s.precision, s.run_id",
                           env=env))
    return rows, wall, home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default=str(REPO / "examples" / "quickstart.yaml"))
    parser.add_argument("--repeats", type=int, default=5, help="bare loops per row and round (median taken)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="counted rounds of (orch run, then the bare loops), after one uncounted; "
                             "medians over rounds are compared")
    opts = parser.parse_args()

    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; before: {uptime()}")
    table: dict[tuple[str, int, int, int, int], Row] = {}
    cores = usable_cores()
    # Bare figures of the loops measured after orch run r, by row: (work/time, median-step).
    after: dict[int, dict[tuple[str, int, int, int, int], tuple[float, float]]] = {}
    for round_no in range(0, opts.rounds + 1):  # round 0: uncounted, it sets up the first bracket
        ticks = cpu_ticks()
        rows, wall, home = orch_round(opts.sweep)
        label = "uncounted first orch run" if round_no == 0 else "orch run"
        print(f"# round {round_no}: {label}, {len(rows)} rows in {wall:.0f} s (ORCH_HOME={home}); "
              f"{steal(ticks)}; {uptime()}")
        ticks = cpu_ticks()
        after[round_no] = {}
        counted: list[tuple[tuple[str, int, int, int, int], float, float]] = []  # (row, tflops, median)
        # The bare loops, alone: hold every core of the machine-wide ledger meanwhile.
        ledger = CoreLedger()
        grant = ledger.acquire(len(cores), len(cores), job="bench_quickstart_fidelity")
        assert grant is not None
        try:
            for found in rows:
                params = json.loads(str(found["params"]))
                m, n, k = int(params["m"]), int(params["n"]), int(params["k"])
                key = (str(found["precision"]), int(found["devices"]), m, n, k)
                row = table.setdefault(key, Row(*key))
                if found["status"] != "completed":
                    row.failed.append(str(found["status"]))
                    continue
                doc = json.loads((Path(str(found["run_dir"])) / "metrics.json").read_text())
                figures = doc["metrics"]
                row.threads, row.cores = int(figures["threads"]), int(figures["cores"])
                # As many timed steps as the run took (--min-time may have added to --iters).
                steps = int(doc["timing"].get("timed_steps") or params["iters"])
                after[round_no][key] = bare(m, n, k, row.precision, row.devices, row.threads, cores[:row.cores],
                                            int(params["warmup"]), steps, opts.repeats)
                if round_no:
                    row.steps.append(steps)
                    counted.append((key, float(found["tflops"]), float(figures.get("tflops_median") or 0.0)))
        finally:
            ledger.release()
        for key, tflops, tflops_median in counted:
            before = after[round_no - 1].get(key)
            now = after[round_no][key]
            pair = [now] if before is None else [before, now]
            row = table[key]
            row.orch.append(tflops)
            row.orch_median.append(tflops_median)
            row.bare.append(statistics.fmean(p[0] for p in pair))
            row.bare_median.append(statistics.fmean(p[1] for p in pair))
        print(f"# round {round_no}: bare loops done; {steal(ticks)}; {uptime()}")

    med = statistics.median
    print()
    print(f"Medians over {opts.rounds} rounds (bare: each round the mean of the loops just before and just after "
          f"the orch run, each the median of {opts.repeats} loops).")
    print()
    print("| precision | procs | M x N x K | cores | threads/proc | timed steps | orch `tflops` | bare work/time "
          "| **orch / bare** | per round | orch `tflops_median` | bare median-step | median / median |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    within = 0
    for row in table.values():
        shape = f"{row.m}x{row.n}x{row.k}"
        if not row.orch:
            print(f"| {row.precision} | {row.devices} | {shape} | | | | {', '.join(row.failed)} | | | | | | |")
            continue
        ratio = med(row.orch) / med(row.bare)
        rounds = " ".join(f"{o / b:.2f}" for o, b in zip(row.orch, row.bare))
        within += 0.9 <= ratio <= 1.1
        print(f"| {row.precision} | {row.devices} | {shape} | {row.cores} | {row.threads} | {int(med(row.steps))} "
              f"| {med(row.orch):.4f} | {med(row.bare):.4f} | **{ratio:.2f}**{'' if 0.9 <= ratio <= 1.1 else ' (out)'} "
              f"| {rounds} | {med(row.orch_median):.4f} | {med(row.bare_median):.4f} "
              f"| {med(row.orch_median) / med(row.bare_median):.2f} |")
    print(f"\n{within} of {len(table)} rows within 0.90-1.10; after: {uptime()}")


if __name__ == "__main__":
    main()
