"""Every failure class on each scheduler, with the scheduler restarted while orch follows. Not a
test: bench_faults.py (``--parts classes``) prints its figures.

One sweep per scheduler whose stand-in program (tests/slurm/test_orch_on_sandbox.py's) fails on
cue by its ``--tag``: exit 3, no metrics, past the walltime, past its memory, cancelled with
`orch cancel`, fine, and flaky (fails once, then passes under a retry policy). orch plans,
submits and follows it to the end with `orch status --watch`, and 4 s into the follow the
scheduler is restarted:

* slurm (the sandbox cluster, which must be up): slurmctld restarted
  (``orchestrator.sites.sandbox.restart_controller``);
* pbs (the emulator): the server down (every client call fails with errno 15010, as after a
  qterm) for 8 s, then back with its history, under a 1 s lost-after grace;
* local: no scheduler daemon to restart; the follower itself is killed (kill -9 of
  `orch status --watch`) and started again, and there is no memory limit to pass (no ``oom``).

Counted: **misclassified** (an attempt whose status and failure class differ from the cue's,
or an attempt that should not exist) and **false failures** (attempts expected to complete that
did not, e.g. marked lost during the restart).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.slurm.test_orch_on_sandbox import SITE as SLURM_SITE  # noqa: E402
from tests.slurm.test_orch_on_sandbox import TRIVIAL_PYTHON  # noqa: E402

SWEEP = """\
name: classes
retry: {{max_attempts: 1}}
experiments:
  - name: once
    workload: gemm
    sites: [{site}]
    walltime: "00:01:00"
    share: true
    grid: {{tag: [{tags}]}}
  - name: retried
    workload: gemm
    sites: [{site}]
    walltime: "00:01:00"
    share: true
    retry: {{max_attempts: 3, failures: [failed]}}
    grid: {{tag: flaky}}
"""

# (tag, attempt) -> (status, failure class) of the results view.
EXPECTED = {("exit3", 1): ("failed", "failed"), ("nometrics", 1): ("failed", "missing_metrics"),
            ("sleep", 1): ("failed", "timeout"), ("oom", 1): ("failed", "out_of_memory"),
            ("cancel", 1): ("failed", "cancelled"), ("ok", 1): ("completed", None),
            ("flaky", 1): ("failed", "failed"), ("flaky", 2): ("completed", None)}


@dataclass
class ClassFigures:
    scheduler: str
    restart: str
    attempts: int = 0
    misclassified: int = 0
    false_failures: int = 0
    seconds: float = 0.0
    details: list = field(default_factory=list)


def _orch(root: Path, env: dict, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    # A generous wall limit: the machine is shared and nice-19 processes may be paused for minutes.
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _sql(root: Path, env: dict, query: str) -> list[dict]:
    cp = _orch(root, env, "sql", "-f", "json", query)
    if cp.returncode != 0:
        raise RuntimeError(f"orch sql failed: {cp.stderr.strip()}")
    return json.loads(cp.stdout)


def _setup(scheduler: str, root: Path) -> tuple[dict, str, list[str]]:
    """The site of the scheduler under root/sites; returns (env, site name, tags)."""
    fake = root / "fake-python"
    fake.write_text(TRIVIAL_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    sites = root / "sites"
    sites.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "PBS_"))}
    env.update({"ORCH_SITES_PATH": str(sites), "ORCH_SUBMIT_GRACE_S": "8", "COLUMNS": "200"})
    tags = ["exit3", "nometrics", "sleep", "oom", "cancel", "ok"]
    if scheduler == "slurm":
        (sites / "trivial.yaml").write_text(SLURM_SITE.format(python=fake, sleep=0))
        return env, "trivial", tags
    if scheduler == "pbs":
        from orchestrator.run.sitecheck import pbs_rehearsal_setup
        from tests.pbs.trivial import SITE as PBS_SITE

        pbs_rehearsal_setup(root)
        (sites / "pbstrivial.yaml").write_text(PBS_SITE.format(python=fake, sleep=0, array_size=8, qsub_args="[]")
                                               + "resources: {select: 'ncpus=1:mem=400mb'}\n")
        env.update({"PATH": f"{root.resolve() / 'pbs-bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                    "PBS_EMU_HOME": str(root.resolve() / "pbs-server"), "PBS_EMU_SLOTS": "8",
                    "ORCH_LOST_AFTER_S": "1"})
        return env, "pbstrivial", tags
    (sites / "flaky.yaml").write_text(
        f"name: flaky\ndescription: local with a python that fails on cue\nscheduler: local\npython: {fake}\n"
        "device: {type: cpu, model: host-cpu, per_node: 2, precisions: [fp32]}\n"
        "queues: [{name: local, max_nodes: 1, max_walltime: '01:00:00'}]\nlauncher: {name: python}\n")
    env["ORCH_LOCAL_CORES"] = "8"  # every run at once (the stand-in takes no CPU to speak of)
    return env, "flaky", [t for t in tags if t != "oom"]


def _restart(scheduler: str, root: Path, env: dict, watcher: subprocess.Popen) -> subprocess.Popen:
    """Restart the scheduler (or, on local, the follower); returns the follower to wait for."""
    if scheduler == "slurm":
        from orchestrator.sites import sandbox

        sandbox.restart_controller()
    elif scheduler == "pbs":
        down = root / "pbs-server" / "down"
        down.touch()
        time.sleep(8)
        down.unlink()
    else:
        watcher.send_signal(signal.SIGKILL)
        watcher.wait()
        watcher = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "status", "--watch", "--interval",
                                    "1", "--json"], cwd=root, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    return watcher


def class_trials(scheduler: str, workdir: Path) -> ClassFigures:
    """One failure-class sweep on the scheduler with a restart during the follow."""
    restart = {"slurm": "slurmctld restarted", "pbs": "server down 8 s, then back",
               "local": "kill -9 of the follower, started again"}[scheduler]
    figures = ClassFigures(scheduler, restart)
    start = time.time()
    root = workdir
    root.mkdir(parents=True, exist_ok=True)
    env, site, tags = _setup(scheduler, root)
    sweep = root / "classes.yaml"
    sweep.write_text(SWEEP.format(site=site, tags=", ".join(tags)))
    for args in (("plan", str(sweep)), ("submit",)):
        cp = _orch(root, env, *args)
        if cp.returncode != 0:
            raise RuntimeError(f"orch {args[0]} on {scheduler} failed: {cp.stdout}{cp.stderr}")
    cancel_id = _sql(root, env, "SELECT id FROM runs WHERE params LIKE '%cancel%'")[0]["id"]
    watcher = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "status", "--watch", "--interval", "1",
                                "--json"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.time() + 120  # cancel once it runs (or at the deadline, queued)
    while time.time() < deadline and _sql(root, env, f"SELECT status FROM runs WHERE id = '{cancel_id}'") != [
            {"status": "running"}]:
        time.sleep(1)
    _orch(root, env, "cancel", cancel_id)
    time.sleep(4)
    watcher = _restart(scheduler, root, env, watcher)
    out, err = watcher.communicate(timeout=3600)
    if watcher.returncode not in (0, 1):
        figures.details.append(f"orch status --watch exited {watcher.returncode}: {err.strip()[-300:]}")
    rows = _sql(root, env, "SELECT json_extract(r.params, '$.tag') AS tag, r.attempt, r.status, r.failure_class, "
                           "a.reason FROM results r LEFT JOIN attempts a ON a.run_id = r.run_id AND "
                           "a.number = r.attempt ORDER BY tag, r.attempt")
    got = {(r["tag"], r["attempt"]): r for r in rows}
    expected = {k: v for k, v in EXPECTED.items() if k[0] in tags or k[0] == "flaky"}
    figures.attempts = len(rows)
    for key, want in expected.items():
        row = got.get(key)
        have = (row["status"], row["failure_class"]) if row else ("missing", None)
        if have != want:
            figures.misclassified += 1
            figures.details.append(f"{key[0]} attempt {key[1]}: {have} not {want} "
                                   f"({(row or {}).get('reason') or ''}"[:300] + ")")
            if want[0] == "completed":
                figures.false_failures += 1
    for key in sorted(set(got) - set(expected)):
        figures.misclassified += 1
        figures.details.append(f"{key[0]} attempt {key[1]} should not exist: {got[key]['status']} "
                               f"{got[key]['failure_class']} ({got[key].get('reason') or ''})"[:300])
    figures.seconds = round(time.time() - start, 1)
    return figures
