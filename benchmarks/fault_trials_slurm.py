"""Fault trials on the sandbox Slurm cluster: kill -9 of `orch submit` and of `orch status --watch`
at random points, counting runs executed twice and runs lost. Not a test: it prints its figures.

    .venv/bin/python benchmarks/fault_trials_slurm.py [--trials 50] [--seed N] [--runs 4] [--keep DIR]

Needs the sandbox cluster up (`orch sandbox up`; this script does not start or stop it, since
other people's tests use it). Each trial plans a sweep of --runs trivial runs on a site of the
sandbox whose "python" is the stand-in of tests/slurm/test_orch_on_sandbox.py (it appends its
Slurm job id to executions.log in its run directory), kills `orch submit` (SIGKILL) at a random
point, then `orch status --watch` likewise, then lets orch repair and finish: `orch status` until
no intent is left, `orch submit`, `orch status --watch`. Counted from the run directories:

* executed twice: runs whose program ran more than once;
* lost: runs that never ran, did not end `finished`, or whose attempt was recorded `lost`.

Also counted from Slurm itself (sacct): jobs beyond one per run. Trials run
``PARALLEL`` at a time on one SQLite database (concurrent orch processes are part of the test).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from threading import Lock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fault_trials_pbs import FaultFigures, _killed  # noqa: E402
from tests.slurm.test_orch_on_sandbox import SITE, TRIVIAL_PYTHON, sweep_text  # noqa: E402

PARALLEL = 3
# Wall limits of the orch commands that are not killed on purpose: generous, because the
# machine is shared and its nice-19 processes may be paused (SIGSTOP) for minutes; a command
# that takes this long is a finding, reported as such.
COMMAND_TIMEOUT_S = 1800


def _orch(workdir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)


def _sql(workdir: Path, env: dict[str, str], query: str) -> list[dict]:
    cp = _orch(workdir, env, "sql", "-f", "json", query)
    if cp.returncode != 0:
        raise RuntimeError(f"orch sql failed: {cp.stderr.strip()}")
    return json.loads(cp.stdout)


def _sandbox_ok() -> str | None:
    """None when the sandbox answers; otherwise why not (the trials do not bring it up)."""
    from orchestrator import sandbox

    st = sandbox.status()
    return None if st.ok else f"the sandbox Slurm cluster is not up ({'; '.join(st.problems)}): run `orch sandbox up`"


def run_trials(trials: int = 50, seed: int = 20261123, runs_per_trial: int = 4, keep: Path | None = None) -> FaultFigures:
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
        cp = _orch(root, env, "plan", str(sweep))
        if cp.returncode != 0:
            raise RuntimeError(f"orch plan failed: {cp.stdout}{cp.stderr}")
        _killed(root, env, trial_rng, 3.0, "submit", "--sweep", name)
        _killed(root, env, trial_rng, 4.0, "status", "--watch", "--interval", "0.5", "--sweep", name)
        deadline = time.time() + 600
        while time.time() < deadline:  # repair: intents found by name or handed back after the grace
            _orch(root, env, "status", "--sweep", name)
            left = _sql(root, env, "SELECT count(*) AS n FROM attempts a JOIN runs r ON r.id = a.run_id "
                                   f"WHERE r.sweep = '{name}' AND a.job_id IS NULL")
            if left == [{"n": 0}]:
                break
            time.sleep(1)
        _orch(root, env, "submit", "--sweep", name)
        _orch(root, env, "status", "--sweep", name, "--watch", "--interval", "1")
        rows = _sql(root, env, "SELECT r.id, r.status, r.run_dir, group_concat(a.failure_class) AS failures "
                               f"FROM runs r LEFT JOIN attempts a ON a.run_id = r.id WHERE r.sweep = '{name}' "
                               "GROUP BY r.id, r.status, r.run_dir")
        with lock:
            figures.submit_kills += 1
            figures.status_kills += 1
            figures.runs += len(rows)
            for row in rows:
                log = Path(row["run_dir"] or "") / "executions.log"
                jobs = log.read_text().split() if log.exists() else []
                if len(jobs) > 1:
                    figures.executed_twice += 1
                    figures.details.append(f"{name} {row['id']}: executed {len(jobs)} times ({', '.join(jobs)})")
                if not jobs or row["status"] != "finished" or "lost" in (row["failures"] or ""):
                    figures.lost += 1
                    figures.details.append(f"{name} {row['id']}: status {row['status']}, failures "
                                           f"{row['failures']}, executed {len(jobs)} times")

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
    print(f"scheduler: {fig.scheduler}")
    print(f"trials: {fig.trials} ({fig.submit_kills} kill -9 of orch submit, {fig.status_kills} of orch status "
          f"--watch), runs: {fig.runs}, {fig.seconds} s")
    print(f"runs executed twice: {fig.executed_twice}")
    print(f"runs lost: {fig.lost}")
    print(f"jobs beyond one per run in Slurm's accounting: {fig.duplicate_jobs}")
    for line in fig.details:
        print(f"  {line}")
    print(json.dumps({k: v for k, v in asdict(fig).items() if k != "details"}))


if __name__ == "__main__":
    main()
