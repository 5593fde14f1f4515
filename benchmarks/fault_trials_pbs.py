"""Fault trials on the PBS emulator: kill -9 of `orch submit` and of `orch status` at random points,
counting runs executed twice and runs lost. Not a test: it prints its figures.

    .venv/bin/python benchmarks/fault_trials_pbs.py [--trials 50] [--seed N] [--runs 4] [--keep DIR]

Each trial plans a sweep of --runs trivial runs on a PBS site served by orch's PBS emulator
(tests/pbs/pbs_emulator.py, in the mode of OpenPBS's current qstat that drops operands of a
batched query), starts `orch submit` and kills it (SIGKILL) at a random point, then starts
`orch status` and kills it at a random point, then lets orch repair and finish: `orch status`
until no intent is left, `orch submit`, `orch status --watch`. Every run's stand-in program
appends its PBS job id to executions.log in its run directory, so the counts are facts of the
run directories, not of orch's database:

* executed twice: runs whose program ran more than once;
* lost: runs that never ran, did not end `finished`, or whose attempt was recorded `lost`.

The goal for both is 0. :func:`run_trials` is what a combined fault benchmark calls (one function
per scheduler); ``main`` prints its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.sitecheck import pbs_rehearsal_setup  # noqa: E402  (writes the emulator's qsub/qstat/qdel)
from tests.pbs.trivial import make_site, sweep_text  # noqa: E402


@dataclass
class FaultFigures:
    scheduler: str
    trials: int
    runs: int
    submit_kills: int
    status_kills: int
    executed_twice: int
    lost: int
    duplicate_jobs: int  # jobs the server received beyond one per run
    seconds: float
    details: list[str] = field(default_factory=list)  # one line per anomaly


def _orch(workdir: Path, env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _killed(workdir: Path, env: dict[str, str], rng: random.Random, high_s: float, *args: str) -> None:
    """Start `orch ARGS` and SIGKILL it after a random delay in [0, high_s) (or let it end first)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=rng.uniform(0.0, high_s))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _sql(workdir: Path, env: dict[str, str], query: str) -> list[dict]:
    cp = _orch(workdir, env, "sql", "-f", "json", query)
    if cp.returncode != 0:
        raise RuntimeError(f"orch sql failed: {cp.stderr.strip()}")
    return json.loads(cp.stdout)


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
        cp = _orch(root, env, "plan", str(sweep))
        if cp.returncode != 0:
            raise RuntimeError(f"orch plan failed: {cp.stdout}{cp.stderr}")
        _killed(root, env, rng, 2.0, "submit", "--sweep", name)
        figures.submit_kills += 1
        _killed(root, env, rng, 2.0, "status", "--sweep", name)
        figures.status_kills += 1
        deadline = time.time() + 120
        while time.time() < deadline:  # repair: intents found by name or handed back after the grace
            _orch(root, env, "status", "--sweep", name)
            left = _sql(root, env, "SELECT count(*) AS n FROM attempts a JOIN runs r ON r.id = a.run_id "
                                   f"WHERE r.sweep = '{name}' AND a.job_id IS NULL")
            if left == [{"n": 0}]:
                break
            time.sleep(0.5)
        _orch(root, env, "submit", "--sweep", name)
        _orch(root, env, "status", "--sweep", name, "--watch", "--interval", "0.3")
        rows = _sql(root, env, "SELECT r.id, r.status, r.run_dir, group_concat(a.failure_class) AS failures "
                               f"FROM runs r LEFT JOIN attempts a ON a.run_id = r.id WHERE r.sweep = '{name}' "
                               "GROUP BY r.id, r.status, r.run_dir")
        figures.runs += len(rows)
        for row in rows:
            log = Path(row["run_dir"] or "") / "executions.log"
            jobs = log.read_text().split() if log.exists() else []
            if len(jobs) > 1:
                figures.executed_twice += 1
                figures.details.append(f"{name} {row['id']}: executed {len(jobs)} times ({', '.join(jobs)})")
            if not jobs or row["status"] != "finished" or "lost" in (row["failures"] or ""):
                figures.lost += 1
                figures.details.append(f"{name} {row['id']}: status {row['status']}, failures {row['failures']}, "
                                       f"executed {len(jobs)} times")
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
    print(f"scheduler: {fig.scheduler}")
    print(f"trials: {fig.trials} ({fig.submit_kills} kill -9 of orch submit, {fig.status_kills} of orch status), "
          f"runs: {fig.runs}, {fig.seconds} s")
    print(f"runs executed twice: {fig.executed_twice}")
    print(f"runs lost: {fig.lost}")
    print(f"jobs beyond one per run on the server: {fig.duplicate_jobs}")
    for line in fig.details:
        print(f"  {line}")
    print(json.dumps({k: v for k, v in asdict(fig).items() if k != "details"}))


if __name__ == "__main__":
    main()
