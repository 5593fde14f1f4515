"""Planning with memory traced from the program (issue 11) against the formula alone.

    .venv/bin/python benchmarks/bench_memory_prediction.py [--accounts] [--no-table] [SWEEP.yaml ...]

Without arguments: every sweep in examples/, each in its own empty cache, and the totals.

For each sweep, in fresh processes of the real CLI (``orch plan --dry-run --json``), each in a
temporary ORCH_HOME, prints wall and CPU seconds (user + system, start-up included) of:

- ``formula``: ``ORCH_MEMORY_TRACE=0`` (orchestrator/predict/memory.py's formulas, as before);
- ``traced, cold``: an empty prediction cache: every distinct shape traced on fake tensors (side by
  side in ``$ORCH_TRACE_WORKERS`` processes, default one per core; CPU counts them all);
- ``traced, warm``: the same again, every shape read from the disk cache (no torch import).

``--accounts``: every account and environment the profiles read set to a placeholder
(orchestrator/sites/placeholders.py), as a user holding them all: no run is refused before its
memory is predicted. ``--no-table``: the shipped pre-traced table off (``ORCH_PRETRACED=0``), to
time tracing itself; with it on (the default), "cold" is a new user's first plan (issue 25 item 6).

Goal (issue 11): planning the examples with predictions on takes at most twice as long as
without. The cold plan is paid once per shape, workload code and torch version.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.sites.placeholders import placeholder_env

REPO = Path(__file__).resolve().parents[1]
DEFAULT = sorted(str(p.relative_to(REPO)) for p in (REPO / "examples").glob("*.yaml"))


def _plan(sweep: str, env: dict[str, str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "plan", "--dry-run", "--json", sweep],
                          cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"orch plan {sweep} exited {proc.returncode}: {proc.stderr[-2000:]}")
    runs = proc.stdout.count('"run_id"')
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), runs


def main(sweeps: list[str], accounts: bool = False, table: bool = True) -> None:
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    print(f"trace workers: {os.environ.get('ORCH_TRACE_WORKERS') or len(os.sched_getaffinity(0))}; "
          f"accounts set: {accounts}; shipped table: {'on' if table else 'off'}")
    print("| sweep | runs | formula | traced, cold | traced, warm | cold / formula (wall) | warm / formula (CPU) |")
    print("|---|---|---|---|---|---|---|")
    totals = [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    for sweep in sweeps:
        with tempfile.TemporaryDirectory() as tmp:
            base = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
            base.update(ORCH_HOME=str(Path(tmp) / "home"), ORCH_MEMORY_CACHE=str(Path(tmp) / "cache"))
            if accounts:
                base.update(placeholder_env())
            if not table:
                base["ORCH_PRETRACED"] = "0"
            formula = _plan(sweep, {**base, "ORCH_MEMORY_TRACE": "0"})
            cold = _plan(sweep, base)
            warm = _plan(sweep, base)
        for total, (w, c, _) in zip(totals, (formula, cold, warm)):
            total[0] += w
            total[1] += c
        cells = [f"{w:.1f} s wall, {c:.1f} s CPU" for w, c, _ in (formula, cold, warm)]
        print(f"| {Path(sweep).name} | {formula[2]} | {' | '.join(cells)} | {cold[0] / formula[0]:.1f} | "
              f"{warm[1] / formula[1]:.2f} |", flush=True)
    if len(sweeps) > 1:
        cells = [f"{w:.1f} s wall, {c:.1f} s CPU" for w, c in totals]
        print(f"| **all {len(sweeps)}** | | {' | '.join(cells)} | {totals[1][0] / totals[0][0]:.1f} | "
              f"{totals[2][1] / totals[0][1]:.2f} |")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    flags = {"--accounts", "--no-table"}
    args = sys.argv[1:]
    main([a for a in args if a not in flags] or DEFAULT, accounts="--accounts" in args, table="--no-table" not in args)
