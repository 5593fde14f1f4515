"""What the kill -9 fault trials share, whatever the scheduler (fault_trials_slurm.py, fault_trials_pbs.py).

A trial plans a sweep of trivial runs whose stand-in program appends its job id to
``executions.log`` in its run directory, kills `orch submit` and `orch status` (SIGKILL) at
random points, then lets orch repair and finish (:func:`repair_and_finish`). :func:`count`
then reads the run directories, not orch's database, so the figures are facts:

* executed twice: runs whose program ran more than once;
* lost: runs that never ran, did not end `finished`, or whose attempt was recorded `lost`.

The goal for both is 0; each scheduler's script adds the scheduler's own count of jobs
beyond one per run.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Wall limit of an orch command that is not killed on purpose: generous, because the machine may
# be shared and paused; a command that takes this long is a finding, reported as such.
COMMAND_TIMEOUT_S = 1800


@dataclass
class FaultFigures:
    scheduler: str
    trials: int
    runs: int
    submit_kills: int
    status_kills: int
    executed_twice: int
    lost: int
    duplicate_jobs: int  # jobs the scheduler received beyond one per run
    seconds: float
    details: list[str] = field(default_factory=list)  # one line per anomaly


def orch(workdir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)


def killed(workdir: Path, env: dict[str, str], rng: random.Random, high_s: float, *args: str) -> None:
    """Start `orch ARGS` and SIGKILL it after a random delay in [0, high_s) (or let it end first)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=rng.uniform(0.0, high_s))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def sql(workdir: Path, env: dict[str, str], query: str) -> list[dict]:
    cp = orch(workdir, env, "sql", "-f", "json", query)
    if cp.returncode != 0:
        raise RuntimeError(f"orch sql failed: {cp.stderr.strip()}")
    return json.loads(cp.stdout)


def plan(workdir: Path, env: dict[str, str], sweep: Path) -> None:
    cp = orch(workdir, env, "plan", str(sweep))
    if cp.returncode != 0:
        raise RuntimeError(f"orch plan failed: {cp.stdout}{cp.stderr}")


def repair_and_finish(workdir: Path, env: dict[str, str], name: str, *, repair_s: float, poll_s: float,
                      watch_interval: float) -> list[dict]:
    """After the kills: `orch status` until no submission intent is left (found by name, or handed
    back after the grace), then `orch submit` and `orch status --watch`; the sweep's runs, with
    their status, run directory and attempts' failure classes."""
    deadline = time.time() + repair_s
    while time.time() < deadline:
        orch(workdir, env, "status", "--sweep", name)
        left = sql(workdir, env, "SELECT count(*) AS n FROM attempts a JOIN runs r ON r.id = a.run_id "
                                 f"WHERE r.sweep = '{name}' AND a.job_id IS NULL")
        if left == [{"n": 0}]:
            break
        time.sleep(poll_s)
    orch(workdir, env, "submit", "--sweep", name)
    orch(workdir, env, "status", "--sweep", name, "--watch", "--interval", str(watch_interval))
    return sql(workdir, env, "SELECT r.id, r.status, r.run_dir, group_concat(a.failure_class) AS failures "
                             f"FROM runs r LEFT JOIN attempts a ON a.run_id = r.id WHERE r.sweep = '{name}' "
                             "GROUP BY r.id, r.status, r.run_dir")


def count(figures: FaultFigures, name: str, rows: list[dict]) -> None:
    """Add a trial's runs to the figures, from each run directory's executions.log."""
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


def print_figures(fig: FaultFigures, status_command: str, duplicates_where: str) -> None:
    print(f"scheduler: {fig.scheduler}")
    print(f"trials: {fig.trials} ({fig.submit_kills} kill -9 of orch submit, {fig.status_kills} of "
          f"{status_command}), runs: {fig.runs}, {fig.seconds} s")
    print(f"runs executed twice: {fig.executed_twice}")
    print(f"runs lost: {fig.lost}")
    print(f"jobs beyond one per run {duplicates_where}: {fig.duplicate_jobs}")
    for line in fig.details:
        print(f"  {line}")
    print(json.dumps({k: v for k, v in asdict(fig).items() if k != "details"}))
