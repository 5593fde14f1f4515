"""Fault trials on the sandbox Slurm cluster: kill -9 of `orch submit` and of `orch status --watch`
at random points, counting runs executed twice and runs lost. Not a test: it prints its figures.

    .venv/bin/python benchmarks/fault_trials_slurm.py [--trials 50] [--seed N] [--runs 4] [--keep DIR]

Needs the sandbox cluster up (`orch sandbox up`; this script does not start or stop it, since
other people's tests use it). Each trial plans a sweep of --runs trivial runs on a site of the
sandbox whose "python" is the stand-in of tests/slurm/test_orch_on_sandbox.py (it appends its
Slurm job id to executions.log in its run directory), kills `orch submit` (SIGKILL) at a random
point, then `orch status --watch` likewise, then lets orch repair and finish: `orch status` until
no intent is left, `orch submit`, `orch status --watch`. Counted from the run directories
(executed twice, lost: benchmarks/fault_trials.py) and from Slurm itself (sacct): jobs beyond
one per run. Trials run
``PARALLEL`` at a time on one SQLite database (concurrent orch processes are part of the test).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Lock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fault_trials import FaultFigures, count, killed, plan, print_figures, repair_and_finish  # noqa: E402
from tests.slurm.test_orch_on_sandbox import SITE, TRIVIAL_PYTHON, sweep_text  # noqa: E402

PARALLEL = 3


def _sandbox_ok() -> str | None:
    """None when the sandbox answers; otherwise why not (the trials do not bring it up)."""
    from orchestrator.sites import sandbox

    st = sandbox.status()
    return None if st.ok else f"the sandbox Slurm cluster is not up ({'; '.join(st.problems)}): run `orch sandbox up`"


def run_trials(trials: int = 50, seed: int = 20261123, runs_per_trial: int = 4,
               keep: Path | None = None) -> FaultFigures:
    """``trials`` kill -9 trials of `orch submit` and `orch status --watch` on the sandbox cluster."""
    problem = _sandbox_ok()
    if problem:
        raise RuntimeError(problem)
    # Run directories must be visible to slurmd: every node is this host, so /tmp works.
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="orch-faults-slurm-"))
    root.mkdir(parents=True, exist_ok=True)
    fake = root / "fake-python"
    fake.write_text(TRIVIAL_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    (root / "sites").mkdir(exist_ok=True)
    (root / "sites" / "trivial.yaml").write_text(SITE.format(python=fake, sleep=0.5))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update({"ORCH_SITES_PATH": str(root / "sites"), "ORCH_SUBMIT_GRACE_S": "8", "COLUMNS": "200"})
    rng = random.Random(seed)
    seeds = [rng.randrange(2**31) for _ in range(trials)]
    tag = "kill"
    figures = FaultFigures("slurm (sandbox cluster)", trials, 0, 0, 0, 0, 0, 0, 0.0)
    lock = Lock()
    start = time.time()

    def trial_run(trial: int) -> None:
        trial_rng = random.Random(seeds[trial])
        name = f"{tag}{trial}"
        sweep = root / f"{name}.yaml"
        sweep.write_text(sweep_text(name, runs_per_trial))
        plan(root, env, sweep)
        killed(root, env, trial_rng, 3.0, "submit", "--sweep", name)
        killed(root, env, trial_rng, 4.0, "status", "--watch", "--interval", "0.5", "--sweep", name)
        rows = repair_and_finish(root, env, name, repair_s=600, poll_s=1.0, watch_interval=1.0)
        with lock:
            figures.submit_kills += 1
            figures.status_kills += 1
            count(figures, name, rows)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        list(pool.map(trial_run, range(trials)))
    # Jobs counted by working directory: every job this run submitted works under root.
    figures.duplicate_jobs = max(0, _slurm_jobs_in(root) - figures.runs)
    figures.seconds = round(time.time() - start, 1)
    if keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return figures


def _slurm_jobs_in(root: Path) -> int:
    """Jobs (array tasks one each) that Slurm accounting ran with a working directory under root."""
    cp = subprocess.run(["sacct", "-n", "-X", "-P", "-a", "-S", "now-1days", "-o", "JobID,WorkDir%400"],
                        capture_output=True, text=True, timeout=120)
    prefix = str(root.resolve())
    return sum(1 for line in cp.stdout.splitlines()
               if "|" in line and line.split("|", 1)[1].startswith(prefix))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--runs", type=int, default=4, help="runs per trial's sweep")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    fig = run_trials(args.trials, args.seed, args.runs, args.keep)
    print_figures(fig, "orch status --watch", "in Slurm's accounting")

if __name__ == "__main__":
    main()
