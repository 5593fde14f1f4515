"""orch itself on the real sandbox cluster: arrays, one sacct per poll, crash repair, a
controller restart, and a real workload through srun.

A "trivial" site (the sandbox with a stand-in python that writes a valid metrics file at
once) keeps 100+ runs fast; the last test runs the real GEMM workload on the sandbox.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import run_orch, write

TRIVIAL_PYTHON = """#!{python}
# Stands in for `python -m workloads.X ...`: writes a valid metrics file, optionally after a nap.
import json, os, sys, time
args = sys.argv[1:]
def arg(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default
time.sleep(float(os.environ.get("TRIVIAL_SLEEP", "0")))
mode = arg("--tag", "")
if mode == "exit3":
    sys.exit(3)
if mode == "nometrics":
    sys.exit(0)
if mode in ("sleep", "cancel"):
    time.sleep(600)
if mode == "oom":
    hog = bytearray(1500 * 1024 * 1024)  # over the job's --mem
    for i in range(0, len(hog), 4096):
        hog[i] = 1
    time.sleep(30)
if mode == "flaky" and not os.path.exists("first-try"):
    open("first-try", "w").close()
    sys.exit(3)
with open("executions.log", "a") as log:  # one line per time this run's program ran
    log.write(os.environ.get("SLURM_JOB_ID", "?") + "\\n")
json.dump({{"schema": "orch.metrics/1", "workload": "gemm", "precision": arg("--precision", "fp32"),
           "world_size": 1, "device": {{"type": "cpu", "model": "sandbox-cpu", "count": 1}},
           "params": {{"m": int(arg("--size-m", "1"))}}, "metrics": {{"tflops": 1.0 + int(arg("--size-m", "1"))}},
           "timing": {{"warmup_steps": 0, "timed_steps": 1}}}}, open(arg("--output"), "w"))
"""

SITE = """\
name: trivial
description: the sandbox cluster with a stand-in python (tests)
scheduler: slurm
python: {python}
max_nodes: 4
device: {{type: cpu, model: sandbox-cpu, per_node: 2, precisions: [fp32]}}
queues: [{{name: debug, max_nodes: 4, max_walltime: "01:00:00"}}]
launcher: {{name: srun}}
env: {{TRIVIAL_SLEEP: "{sleep}"}}
directives: ["--mem=400M"]
executor: {{max_array_size: 1000}}
"""


def sweep_text(name: str, count: int, walltime: str = "00:05:00") -> str:
    sizes = ", ".join(str(i) for i in range(1, count + 1))
    return (f"name: {name}\nexperiments:\n  - name: many\n    workload: gemm\n    sites: [trivial]\n"
            f"    walltime: '{walltime}'\n    grid:\n      m: [{sizes}]\n")


def trivial_site(workdir: Path):
    """The trivial site in ``workdir`` (its own .orch/ and database); returns a runner of orch there."""
    fake = write(workdir / "fake-python", TRIVIAL_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)

    def make_site(sleep: float = 0.0) -> None:
        write(workdir / "sites" / "trivial.yaml", SITE.format(python=fake, sleep=sleep))

    make_site()

    site_env = {"ORCH_SITES_PATH": str(workdir / "sites"), "ORCH_SUBMIT_GRACE_S": "8"}

    def orch(*args: str, **kw):
        return run_orch(*args, cwd=workdir, env={**site_env, **kw.pop("env", {})}, **kw)

    def popen_env(**extra: str) -> dict[str, str]:
        """The environment of an orch process the test starts itself (to kill it, or beside others)."""
        return {**{k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}, **site_env, **extra}

    orch.workdir = workdir  # type: ignore[attr-defined]
    orch.make_site = make_site  # type: ignore[attr-defined]
    orch.popen_env = popen_env  # type: ignore[attr-defined]
    return orch


@pytest.fixture
def trivial(cluster, tmp_path: Path):
    """A working directory on the shared filesystem with the trivial site; returns a runner."""
    return trivial_site(tmp_path)


def sql(orch, query: str) -> list[dict]:
    return json.loads(orch("sql", "-f", "json", query, check=True).stdout)


def test_a_sweep_of_120_runs_goes_as_one_array_and_is_followed_with_one_sacct_per_poll(trivial) -> None:
    sweep = write(trivial.workdir / "big.yaml", sweep_text("big", 120))
    trivial("plan", str(sweep), check=True)
    submitted = json.loads(trivial("submit", "--json", check=True).stdout)
    assert len(submitted["submitted"]) == 120
    assert submitted["scheduler_calls"].get("sbatch") == 1  # one array for 120 runs of one shape
    assert all("_" in s["job_id"] for s in submitted["submitted"])  # array task ids A_i

    status = json.loads(trivial("status", "--watch", "--interval", "2", "--json", check=True).stdout)
    assert status["counts"] == {"finished": 120}
    assert status["scheduler_calls"].get("sacct", 0) <= status["polls"]
    rows = sql(trivial, "SELECT count(*) AS n, min(tflops) AS lo, max(tflops) AS hi FROM results "
                        "WHERE status = 'completed'")
    assert rows == [{"n": 120, "lo": 2.0, "hi": 121.0}]


# The trials wait on Slurm and on the 8 s grace far more than they compute: they run in lanes side
# by side, each lane its own working directory and database (the cluster is the one shared thing).
KILL_TRIALS, KILL_LANES = 20, 4


def _kill_trials(lane, trials: list[int]) -> None:
    """Kill `orch submit` at a random moment in each trial; `orch status` repairs; each run ends
    with exactly one job in Slurm (submitted again only if it had never reached Slurm)."""
    env = lane.popen_env()
    for trial in trials:
        rng = random.Random(20261122 + trial)
        name = f"kill{trial}"
        sweep = write(lane.workdir / f"{name}.yaml", sweep_text(name, 6).replace(
            "    grid:", "    grid:\n      precision: fp32", 1))
        lane("plan", str(sweep), check=True)
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "submit", "--sweep", name],
                                cwd=lane.workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # Repair: status adopts jobs that reached Slurm; intents that never did go back to
        # planned after the grace period; then submit what is planned.
        deadline = time.time() + 60
        while time.time() < deadline:
            lane("status", "--sweep", name, check=True)
            left = sql(lane, f"SELECT count(*) AS n FROM attempts a JOIN runs r ON r.id = a.run_id "
                             f"WHERE r.sweep = '{name}' AND a.job_id IS NULL")
            if left == [{"n": 0}]:
                break
            time.sleep(2)
        # Submit what is planned again; when the killed submit had reached Slurm with every run
        # there is nothing left, which `orch submit` reports with exit 1.
        again = lane("submit", "--sweep", name)
        assert again.returncode == 0 or (again.returncode == 1 and "nothing to submit" in again.stderr), (
            again.stdout + again.stderr)
        runs = sql(lane, f"SELECT r.id, r.status, count(a.id) AS attempts, count(a.job_id) AS jobs "
                         f"FROM runs r LEFT JOIN attempts a ON a.run_id = r.id WHERE r.sweep = '{name}' "
                         f"GROUP BY r.id, r.status")
        assert len(runs) == 6
        for run in runs:
            assert run["attempts"] == 1 and run["jobs"] == 1, (trial, run)
    # Every run's program ran exactly once: nothing lost, nothing run twice.
    final = json.loads(lane("status", "--watch", "--interval", "2", "--json", check=True).stdout)
    failed = sql(lane, "SELECT r.sweep, a.job_id, a.failure_class, a.exit_code, a.reason FROM attempts a "
                       "JOIN runs r ON r.id = a.run_id WHERE a.state != 'completed'")
    assert set(final["counts"]) == {"finished"}, failed
    for trial in trials:
        for run in sql(lane, f"SELECT id, run_dir FROM runs WHERE sweep = 'kill{trial}'"):
            executions = (Path(run["run_dir"]) / "executions.log").read_text().split()
            assert len(executions) == 1, (trial, run["id"], executions)


def test_sigkill_during_submit_never_loses_or_duplicates_a_run(cluster, tmp_path: Path) -> None:
    """20 trials of a SIGKILL during `orch submit`, in lanes that run side by side."""
    lanes = [trivial_site(tmp_path / f"lane{i}") for i in range(KILL_LANES)]
    with ThreadPoolExecutor(KILL_LANES) as pool:
        done = [pool.submit(_kill_trials, lane, list(range(i, KILL_TRIALS, KILL_LANES)))
                for i, lane in enumerate(lanes)]
        for future in done:
            future.result()  # a lane's failed assertion fails the test with its message


def _stub(folder: Path, name: str, body: str) -> None:
    """A command of that name in ``folder``, put before Slurm's own on PATH."""
    write(folder / name, "#!/bin/bash\n" + body + "\n").chmod(0o755)


def _path(folder: Path) -> dict[str, str]:
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


def test_an_intent_is_never_handed_back_while_slurm_cannot_be_asked(trivial) -> None:
    """sbatch reaches the controller but answers after orch gave up on it (the intents stay, their
    jobs run); past the grace, sacct and squeue fail: `orch status` must not hand the runs back
    to be submitted again (their jobs exist), and says why; once Slurm answers it finds the jobs,
    and each run's program ran once."""
    late, down = trivial.workdir / "late-bin", trivial.workdir / "down-bin"
    _stub(late, "sbatch", f'{shutil.which("sbatch")} "$@"\nexec sleep 60')  # submitted, then silent
    _stub(down, "sacct", 'echo "sacct: error: Problem talking to the database: Connection refused" >&2; exit 1')
    _stub(down, "squeue", 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1')
    sweep = write(trivial.workdir / "late.yaml", sweep_text("late", 2))
    trivial("plan", str(sweep), check=True)
    trivial("submit", "--sweep", "late", check=True, env=_path(late))  # timed out after 4 s: uncertain
    assert sql(trivial, "SELECT count(*) AS n FROM attempts WHERE job_id IS NULL") == [{"n": 2}]
    time.sleep(9)  # past the 8 s grace
    proc = trivial("status", "--sweep", "late", check=True, env=_path(down))
    assert "2 run(s) stay 'submitting'" in proc.stderr and "Traceback" not in proc.stderr
    rows = sql(trivial, "SELECT r.status, a.job_id, a.reason FROM runs r JOIN attempts a ON a.run_id = r.id")
    assert [(r["status"], r["job_id"]) for r in rows] == [("submitting", None)] * 2, rows
    assert all("sacct could not say" in r["reason"] for r in rows), rows
    final = json.loads(trivial("status", "--sweep", "late", "--watch", "--interval", "1", "--json",
                               check=True).stdout)
    assert final["counts"] == {"finished": 2}
    for run in sql(trivial, "SELECT run_dir FROM runs WHERE sweep = 'late'"):
        assert len((Path(run["run_dir"]) / "executions.log").read_text().split()) == 1


def test_a_job_of_an_earlier_campaign_is_never_adopted(trivial) -> None:
    """The same sweep ran before in another ORCH_HOME (run ids are content hashes: the same runs,
    the same attempt numbers), and Slurm's accounting keeps those jobs. Now a submit is
    interrupted before its sbatch reaches Slurm: repair must not take the earlier campaign's
    finished job for this attempt's (a job long ended, no metrics in this run directory: the run
    failed), but hand the run back, submit it again and run it once."""
    sweep = write(trivial.workdir / "again.yaml", sweep_text("again", 2))
    before = {"ORCH_HOME": str(trivial.workdir / "before")}
    trivial("plan", str(sweep), check=True, env=before)
    trivial("submit", check=True, env=before)
    assert json.loads(trivial("status", "--watch", "--interval", "1", "--json", check=True,
                              env=before).stdout)["counts"] == {"finished": 2}
    earlier = {r["job_id"] for r in json.loads(trivial("sql", "-f", "json", "SELECT job_id FROM attempts",
                                                       check=True, env=before).stdout)}
    lost = trivial.workdir / "lost-bin"
    _stub(lost, "sbatch", "exec sleep 60")  # never reaches the controller; given up on after 4 s
    trivial("plan", str(sweep), check=True)
    trivial("submit", "--sweep", "again", check=True, env=_path(lost))
    time.sleep(9)  # past the 8 s grace
    trivial("status", check=True)  # repair: not found under this attempt's name, handed back
    assert sql(trivial, "SELECT status FROM runs") == [{"status": "planned"}] * 2
    trivial("submit", check=True)
    final = json.loads(trivial("status", "--watch", "--interval", "1", "--json", check=True).stdout)
    assert final["counts"] == {"finished": 2}, sql(trivial, "SELECT * FROM attempts")
    jobs = {r["job_id"] for r in sql(trivial, "SELECT job_id FROM attempts")}
    assert len(jobs) == 2 and not jobs & earlier, (jobs, earlier)
    for run in sql(trivial, "SELECT run_dir FROM runs"):
        assert len((Path(run["run_dir"]) / "executions.log").read_text().split()) == 1


def test_a_long_submit_keeps_its_intents_while_status_runs(trivial) -> None:
    """One `orch submit` of six plain jobs whose sbatch calls take 2 s each (under the 4 s timeout):
    the last intents wait longer than the 8 s grace for their sbatch. An `orch status` meanwhile
    must not hand them back to `planned`: the grace also runs from the last sbatch started."""
    slow = trivial.workdir / "slow-bin"
    _stub(slow, "sbatch", f'sleep 2\nexec {shutil.which("sbatch")} "$@"')
    site = trivial.workdir / "sites" / "trivial.yaml"
    site.write_text(site.read_text().replace("max_array_size: 1000", "max_array_size: 1"))
    sweep = write(trivial.workdir / "slow.yaml", sweep_text("slow", 6))
    trivial("plan", str(sweep), check=True)
    submit = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "submit", "--sweep", "slow"],
                              cwd=trivial.workdir, env=trivial.popen_env(**_path(slow)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started, statuses = time.time(), 0
    while submit.poll() is None:
        if time.time() - started > 8.5:
            trivial("status", "--sweep", "slow", check=True)
            statuses += 1
        time.sleep(0.3)
    assert submit.returncode == 0 and statuses > 0  # six sbatch calls of 2 s outlast the grace
    trivial("status", "--sweep", "slow", "--watch", "--interval", "1", check=True)
    runs = sql(trivial, "SELECT r.status, count(a.id) AS attempts FROM runs r JOIN attempts a ON a.run_id = r.id "
                        "WHERE r.sweep = 'slow' GROUP BY r.id, r.status")
    assert runs == [{"status": "finished", "attempts": 1}] * 6, runs
    for run in sql(trivial, "SELECT run_dir FROM runs WHERE sweep = 'slow'"):
        assert len((Path(run["run_dir"]) / "executions.log").read_text().split()) == 1


def test_restarting_slurmctld_while_watching_fails_no_run(trivial) -> None:
    from orchestrator.sites import sandbox

    trivial.make_site(sleep=15)
    sweep = write(trivial.workdir / "restart.yaml", sweep_text("restart", 8))
    trivial("plan", str(sweep), check=True)
    trivial("submit", check=True)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ORCH_")},
           "ORCH_SITES_PATH": str(trivial.workdir / "sites")}
    watcher = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "status", "--watch", "--interval", "1",
                                "--json"], cwd=trivial.workdir, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    sandbox.restart_controller()
    out, err = watcher.communicate(timeout=300)
    assert watcher.returncode == 0, err
    assert json.loads(out)["counts"] == {"finished": 8}


def test_real_gemm_on_two_nodes_through_srun(cluster, workdir: Path) -> None:
    """The real workload on the sandbox site: 1 device, and 4 devices over 2 nodes x 2 tasks."""
    sweep = write(workdir / "gemm.yaml", """\
name: sandbox-gemm
experiments:
  - name: g
    workload: gemm
    sites: [sandbox]
    walltime: "00:10:00"
    grid: {devices: [1, 4], m: 64, n: 64, k: 64, warmup: 1, iters: 3}
""")
    proc = run_orch("run", str(sweep), "--interval", "2", cwd=workdir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT devices, nodes, node_list, tflops FROM results "
                               "ORDER BY devices", cwd=workdir, check=True).stdout)
    assert [(r["devices"], r["nodes"]) for r in rows] == [(1, 1), (4, 2)]
    assert all(r["tflops"] > 0 for r in rows)
    assert "n" in rows[1]["node_list"] and "," in rows[1]["node_list"] or "[" in rows[1]["node_list"]


def test_the_probe_of_the_sandbox_site_crosses_two_nodes(cluster, workdir: Path) -> None:
    """`orch sites probe sandbox --nodes 2`: every device of two virtual nodes (4 ranks through srun),
    the all-reduce between them, the run directory seen from both."""
    proc = run_orch("sites", "probe", "sandbox", "--nodes", "2", "--json", cwd=workdir, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = json.loads(proc.stdout)["probes"][0]
    assert probe["passed"] and probe["nodes"] == 2 and probe["ranks_requested"] == 4, probe["checks"]
    assert probe["allreduce_gbs"] > 0 and len({r["node"] for r in probe["report"]["ranks"]}) == 2


FAILURES = """\
name: failures
retry: {max_attempts: 1}
experiments:
  - name: once
    workload: gemm
    sites: [trivial]
    walltime: "00:01:00"
    grid: {tag: [exit3, nometrics, sleep, oom, cancel, ok]}
  - name: retried
    workload: gemm
    sites: [trivial]
    walltime: "00:01:00"
    retry: {max_attempts: 3, failures: [failed]}
    grid: {tag: flaky}
"""


def test_each_failure_class_lands_in_the_db_and_retries_follow_policy(trivial) -> None:
    sweep = write(trivial.workdir / "failures.yaml", FAILURES)
    trivial("plan", str(sweep), check=True)
    trivial("submit", check=True)
    cancel_id = sql(trivial, "SELECT id FROM runs WHERE params LIKE '%cancel%'")[0]["id"]
    time.sleep(5)
    trivial("cancel", cancel_id, check=True)
    status = json.loads(trivial("status", "--watch", "--interval", "2", "--json", check=True).stdout)
    assert status["counts"] == {"failed": 4, "cancelled": 1, "finished": 2}
    rows = sql(trivial, "SELECT json_extract(params, '$.tag') AS tag, attempt, status, failure_class, exit_code "
                        "FROM results ORDER BY tag, attempt")
    got = {(r["tag"], r["attempt"]): (r["status"], r["failure_class"], r["exit_code"]) for r in rows}
    assert got[("exit3", 1)] == ("failed", "failed", 3)
    assert got[("nometrics", 1)][:2] == ("failed", "missing_metrics")
    assert got[("sleep", 1)][:2] == ("failed", "timeout")
    assert got[("oom", 1)][:2] == ("failed", "out_of_memory")
    assert got[("cancel", 1)][:2] == ("failed", "cancelled")
    assert got[("ok", 1)] == ("completed", None, 0)
    assert got[("flaky", 1)] == ("failed", "failed", 3) and got[("flaky", 2)][:2] == ("completed", None)
    assert ("flaky", 3) not in got and ("exit3", 2) not in got
