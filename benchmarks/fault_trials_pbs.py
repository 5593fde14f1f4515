"""Fault trials on the PBS emulator: kill -9 of `orch submit` and of `orch status` at random points,
counting runs executed twice and runs lost. Not a test: it prints its figures.

    .venv/bin/python benchmarks/fault_trials_pbs.py [--trials 50] [--seed N] [--runs 4] [--keep DIR]

Each trial plans a sweep of --runs trivial runs on a PBS site served by orch's PBS emulator
(tests/pbs/pbs_emulator.py, in the mode of OpenPBS's current qstat that drops operands of a
batched query), starts `orch submit` and kills it (SIGKILL) at a random point, then starts
`orch status` and kills it at a random point, then lets orch repair and finish, and counts from
the run directories (benchmarks/fault_trials.py) and the emulator's job records.

:func:`run_trials` is what a combined fault benchmark calls (one function per scheduler);
``main`` prints its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fault_trials import FaultFigures, count, killed, plan, print_figures, repair_and_finish  # noqa: E402
from orchestrator.run.sitecheck import pbs_rehearsal_setup  # noqa: E402  (writes the emulator's qsub/qstat/qdel)
from tests.pbs.trivial import make_site, sweep_text  # noqa: E402


def run_trials(trials: int = 50, seed: int = 20261123, runs_per_trial: int = 4, drop_operands: bool = True,
               keep: Path | None = None) -> FaultFigures:
    """``trials`` kill -9 trials of `orch submit` and `orch status` on the PBS emulator."""
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="orch-faults-pbs-"))
    root.mkdir(parents=True, exist_ok=True)
    pbs_rehearsal_setup(root)  # pbs-bin/ (the emulator's commands), pbs-server/ its state
    make_site(root, sleep=0.2, array_size=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "PBS_"))}
    env.update({"PATH": f"{root.resolve() / 'pbs-bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                "PBS_EMU_HOME": str(root.resolve() / "pbs-server"), "PBS_EMU_SLOTS": "2",
                "ORCH_SITES_PATH": str(root / "sites"), "ORCH_SUBMIT_GRACE_S": "4", "COLUMNS": "200"})
    if drop_operands:
        env["PBS_EMU_DROP_OPERANDS"] = "1"
    rng = random.Random(seed)
    figures = FaultFigures("pbs (emulator" + (", qstat dropping operands)" if drop_operands else ")"), trials,
                           0, 0, 0, 0, 0, 0, 0.0)
    start = time.time()
    for trial in range(trials):
        name = f"kill{trial}"
        sweep = root / f"{name}.yaml"
        sweep.write_text(sweep_text(name, runs_per_trial))
        plan(root, env, sweep)
        killed(root, env, rng, 2.0, "submit", "--sweep", name)
        figures.submit_kills += 1
        killed(root, env, rng, 2.0, "status", "--sweep", name)
        figures.status_kills += 1
        count(figures, name, repair_and_finish(root, env, name, repair_s=120, poll_s=0.5, watch_interval=0.3))
    server_jobs = 0
    for path in (root / "pbs-server" / "jobs").glob("*.json"):
        rec = json.loads(path.read_text())
        server_jobs += len(rec["subjobs"]) if rec["array"] else 1
    figures.duplicate_jobs = max(0, server_jobs - figures.runs)
    figures.seconds = round(time.time() - start, 1)
    if keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--runs", type=int, default=4, help="runs per trial's sweep (2 per array)")
    parser.add_argument("--no-drop", action="store_true", help="a 23.06 qstat (no dropped operands)")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    fig = run_trials(args.trials, args.seed, args.runs, not args.no_drop, args.keep)
    print_figures(fig, "orch status", "on the server")

if __name__ == "__main__":
    main()
