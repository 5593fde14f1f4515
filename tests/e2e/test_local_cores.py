"""Local runs are admitted by cores: real orch processes, real jobs, real torch, real kill -9.

Every test points ORCH_LOCAL_CORES_DIR at its own directory, so it queues only with itself
and not with other tests (or people) on the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from orchestrator.run.executors.local_cores import CoreLedger, snapshot
from tests.conftest import REPO, run_orch, write

FAKE_PYTHON = """#!/bin/bash
# Stands in for python: behaves as the --tag value says, else runs the real interpreter.
mode=""; prev=""
for arg in "$@"; do [ "$prev" = "--tag" ] && mode="$arg"; prev="$arg"; done
case "$mode" in
  sleep) sleep 600 ;;
  slowok) sleep 2; exec {real} "$@" ;;
  *) exec {real} "$@" ;;
esac
"""

SITE = """\
name: {name}
description: This machine, for admission tests.
scheduler: local
python: {python}
device: {{type: cpu, model: host-cpu, per_node: 4, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: torchrun}}
{extra}
"""

ONE_RUN = """\
name: {name}
experiments:
  - name: one
    workload: gemm
    sites: [one]
    walltime: "{walltime}"
    grid: {{m: 32, warmup: 1, iters: 2, tag: {tag}}}
"""


def _time(text: str | None) -> datetime:
    """A timestamp the test expects recorded (every attempt it reads on has ended)."""
    assert text, "a timestamp the test compares was not recorded"
    return datetime.fromisoformat(text)


def _attempts(workdir: Path, env: dict[str, str]) -> list[dict]:
    return json.loads(run_orch("sql", "-f", "json",
                               "SELECT r.sweep, r.devices, r.run_dir, r.status AS run_status, a.state, "
                               "a.failure_class, a.submitted_at, a.started_at, a.finished_at "
                               "FROM attempts a JOIN runs r ON r.id = a.run_id ORDER BY a.started_at",
                               cwd=workdir, env=env, check=True).stdout)


def test_by_default_a_run_has_the_machine_to_itself(workdir: Path) -> None:
    """Without `share: true` no two runs overlap in time (cores share caches and memory
    bandwidth): each holds every core and splits them into threads among its processes."""
    write(workdir / "mysites" / "two.yaml", SITE.format(name="two", python=sys.executable,
                                                         extra="executor: {cores: 2}"))
    sweep = write(workdir / "s.yaml", """\
name: alone
experiments:
  - name: g
    workload: gemm
    sites: [two]
    walltime: "00:05:00"
    grid: {devices: [1, 2], m: 32, warmup: 1, iters: 2, repeats: 2}
""")
    env = {"ORCH_LOCAL_CORES_DIR": str(workdir / "ledger")}
    proc = run_orch("--sites-dir", str(workdir / "mysites"), "run", str(sweep), "--interval", "0.5",
                    cwd=workdir, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _attempts(workdir, env)
    assert len(rows) == 4 and all(r["state"] == "completed" for r in rows)
    spans = sorted((_time(r["started_at"]), _time(r["finished_at"])) for r in rows)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start, spans  # one after another, never beside each other
    for r in rows:
        metrics = json.loads((Path(r["run_dir"]) / "metrics.json").read_text())["metrics"]
        assert metrics["cores"] == 2 and metrics["threads"] == 2 // r["devices"], (r, metrics)
        assert "the machine to itself" in (Path(r["run_dir"]) / "stderr.log").read_text()


def test_runs_share_no_core_and_record_cores_and_threads(workdir: Path) -> None:
    """With `share: true` and capacity 2 from the profile: 1-, 2- and 4-process runs never hold
    more than 2 cores at once."""
    write(workdir / "mysites" / "two.yaml", SITE.format(name="two", python=sys.executable,
                                                         extra="executor: {cores: 2}"))
    sweep = write(workdir / "s.yaml", """\
name: cores
experiments:
  - name: g
    workload: gemm
    sites: [two]
    share: true
    walltime: "00:05:00"
    grid: {devices: [1, 2, 4], m: 32, warmup: 1, iters: 2, tag: a}
  - name: h
    workload: gemm
    sites: [two]
    share: true
    walltime: "00:05:00"
    grid: {devices: 1, m: 32, warmup: 1, iters: 2, tag: b}
""")
    env = {"ORCH_LOCAL_CORES_DIR": str(workdir / "ledger")}
    proc = run_orch("--sites-dir", str(workdir / "mysites"), "run", str(sweep), "--interval", "0.5",
                    cwd=workdir, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _attempts(workdir, env)
    assert len(rows) == 4 and all(r["state"] == "completed" for r in rows)

    # At every moment the runs under way hold at most 2 cores (a run holds min(processes, 2)).
    events = []
    for r in rows:
        held = min(r["devices"], 2)
        events += [(_time(r["started_at"]), 1, held), (_time(r["finished_at"]), 0, -held)]
    in_use = 0
    for _, _, change in sorted(events):  # ends sort before starts at the same instant
        in_use += change
        assert in_use <= 2, rows

    for r in rows:
        assert _time(r["submitted_at"]) <= _time(r["started_at"]) < _time(r["finished_at"])
        run_dir = Path(r["run_dir"])
        metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
        assert metrics["cores"] == min(r["devices"], 2), (r, metrics)
        assert metrics["threads"] == 1, (r, metrics)  # cores held // processes, at least 1
        log = (run_dir / "stderr.log").read_text()
        assert ("runs alone" in log) == (r["devices"] > 2), log
    assert snapshot(workdir / "ledger")["holding"] == []


def _ledger_until(directory: Path, predicate, what: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = snapshot(directory)
        if predicate(state):
            return state
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {snapshot(directory)}")


def test_waiting_run_is_pending_cancellable_and_its_walltime_starts_with_its_cores(workdir: Path) -> None:
    """Capacity 1 from ORCH_LOCAL_CORES: a run that waited longer than its walltime still completes."""
    fake = write(workdir / "fake-python", FAKE_PYTHON.replace("{real}", sys.executable))
    fake.chmod(0o755)
    write(workdir / "mysites" / "one.yaml", SITE.format(name="one", python=fake, extra=""))
    ledger = workdir / "ledger"
    env = {"ORCH_LOCAL_CORES_DIR": str(ledger), "ORCH_LOCAL_CORES": "1"}

    def orch(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_orch("--sites-dir", str(workdir / "mysites"), *args, cwd=workdir, env=env, check=check)

    def attempt(sweep: str) -> dict:
        return [r for r in _attempts(workdir, env) if r["sweep"] == sweep][0]

    # 1. A run that holds the only core until it is cancelled.
    orch("plan", str(write(workdir / "hold.yaml", ONE_RUN.format(name="hold", walltime="00:10:00", tag="sleep"))))
    orch("submit", "--sweep", "hold")
    _ledger_until(ledger, lambda s: s["holding"], "the first run to get the core")

    # 2. A second run waits: pending, not started; cancelling it ends the wait.
    orch("plan", str(write(workdir / "victim.yaml", ONE_RUN.format(name="victim", walltime="00:05:00", tag="ok"))))
    orch("submit", "--sweep", "victim")
    waiting = _ledger_until(ledger, lambda s: s["waiting"], "the second run to queue")["waiting"]
    assert len(waiting) == 1 and waiting[0]["need"] == 1
    orch("status")
    victim = attempt("victim")
    assert victim["state"] == "pending" and victim["run_status"] == "submitted" and not victim["started_at"]
    assert attempt("hold")["state"] == "running"
    orch("cancel", "--sweep", "victim")
    orch("status", "--sweep", "victim", "--watch", "--interval", "0.5")
    victim = attempt("victim")
    assert victim["failure_class"] == "cancelled" and not victim["started_at"], victim
    assert snapshot(ledger)["waiting"] == []

    # 3. A run with a 40 s walltime waits 45 s for the core, then runs to its end.
    orch("plan", str(write(workdir / "short.yaml", ONE_RUN.format(name="short", walltime="00:00:40", tag="slowok"))))
    orch("submit", "--sweep", "short")
    _ledger_until(ledger, lambda s: s["waiting"], "the third run to queue")
    time.sleep(45)
    assert snapshot(ledger)["waiting"], "the waiting run was stopped while it waited"
    orch("cancel", "--sweep", "hold")
    orch("status", "--watch", "--interval", "0.5")
    hold, short = attempt("hold"), attempt("short")
    assert hold["failure_class"] == "cancelled"
    assert short["state"] == "completed", short
    assert _time(short["started_at"]) >= _time(hold["finished_at"])
    # Counted from submission, its walltime would have ended while it waited.
    assert (_time(short["finished_at"]) - _time(short["submitted_at"])).total_seconds() > 45
    state = snapshot(ledger)
    assert state["waiting"] == [] and state["holding"] == []


HOLDER = """\
import sys, time
import pytest

from orchestrator.run.executors.local_cores import CoreLedger
grant = CoreLedger().acquire(1, capacity=1, job=sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def test_killed_holder_and_waiter_hold_no_core(tmp_path: Path) -> None:
    """kill -9 of a job that holds the only core, and of one queued behind it: the next run gets it."""
    env = {**os.environ, "ORCH_LOCAL_CORES_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "holder"], env=env, stdout=subprocess.PIPE, text=True)
    waiter = None
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        waiter = subprocess.Popen([sys.executable, "-c", HOLDER, "waiter"], env=env, stdout=subprocess.PIPE,
                                  text=True)
        deadline = time.monotonic() + 60
        while not snapshot(tmp_path)["waiting"]:
            assert time.monotonic() < deadline, "the second process never queued"
            time.sleep(0.1)
        assert [e["job"] for e in snapshot(tmp_path)["holding"]] == ["holder"]
    finally:
        for proc in (holder, waiter):
            if proc is not None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
    give_up = time.monotonic() + 30
    grant = CoreLedger(tmp_path).acquire(1, capacity=1, job="next", should_stop=lambda: time.monotonic() > give_up)
    assert grant is not None and grant.held == 1 and grant.waited_s < 5
    state = snapshot(tmp_path)
    assert [e["job"] for e in state["holding"]] == ["next"] and state["waiting"] == []


def test_capacity_mistakes_are_one_line(workdir: Path) -> None:
    write(workdir / "mysites" / "bad.yaml", SITE.format(name="bad", python=sys.executable,
                                                         extra="executor: {cores: 0}"))
    sweep = write(workdir / "s.yaml", ONE_RUN.format(name="s", walltime="00:01:00", tag="x").replace("[one]", "[bad]"))
    proc = run_orch("--sites-dir", str(workdir / "mysites"), "plan", str(sweep), cwd=workdir)
    assert proc.returncode == 2 and "bad.yaml:" in proc.stderr and "cores" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr

    write(workdir / "mysites" / "bad.yaml", SITE.format(name="bad", python=sys.executable, extra=""))
    proc = run_orch("--sites-dir", str(workdir / "mysites"), "run", str(sweep), cwd=workdir,
                    env={"ORCH_LOCAL_CORES": "lots", "ORCH_LOCAL_CORES_DIR": str(workdir / "ledger")})
    assert proc.returncode == 2 and "ORCH_LOCAL_CORES" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def _wakeups(pid: int) -> int:
    """Context switches of a process so far (each a wake-up that took a core from whatever ran)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return sum(int(line.split()[1]) for line in status.splitlines()
               if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")))


def test_queued_and_running_jobs_leave_the_measured_run_alone(workdir: Path) -> None:
    """Each local job's controller looks at its task about twice a second (submitit's own: 24)."""
    write(workdir / "mysites" / "one.yaml", SITE.format(name="one", python=_fake_python(workdir), extra=""))
    env = {"ORCH_LOCAL_CORES_DIR": str(workdir / "ledger"), "ORCH_LOCAL_CORES": "1"}

    def orch(*args: str) -> subprocess.CompletedProcess[str]:
        return run_orch("--sites-dir", str(workdir / "mysites"), *args, cwd=workdir, env=env, check=True)

    for name in ("hold", "queued1", "queued2"):
        orch("plan", str(write(workdir / f"{name}.yaml", ONE_RUN.format(name=name, walltime="00:10:00", tag="sleep"))))
        orch("submit", "--sweep", name)
    try:
        _ledger_until(workdir / "ledger", lambda s: s["holding"] and len(s["waiting"]) == 2, "one run and two queued")
        controllers = [int(r["job_id"].split("-")[0]) for r in json.loads(orch("sql", "-f", "json",
                                                                 "SELECT job_id FROM attempts").stdout)]
        assert len(controllers) == 3
        for pid in controllers:  # orch's controller, not submitit's module
            assert b"orchestrator.run.executors.local_controller" in Path(f"/proc/{pid}/cmdline").read_bytes()
        before = {pid: _wakeups(pid) for pid in controllers}
        time.sleep(4.0)
        rates = {pid: (_wakeups(pid) - before[pid]) / 4.0 for pid in controllers}
        assert all(rate <= 4 for rate in rates.values()), f"wake-ups per second by controller: {rates}"
    finally:
        orch("cancel", "--sweep", "hold")
        for name in ("queued1", "queued2"):
            orch("cancel", "--sweep", name)
        orch("status", "--watch", "--interval", "0.5")
    assert snapshot(workdir / "ledger")["holding"] == []


def _fake_python(workdir: Path) -> Path:
    fake = write(workdir / "fake-python", FAKE_PYTHON.replace("{real}", sys.executable))
    fake.chmod(0o755)
    return fake


RECORDING_PYTHON = """#!/bin/bash
# Stands in for python: notes the GPUs the run was shown, then runs the real interpreter.
echo "${{CUDA_VISIBLE_DEVICES-unset}}" > "$ORCH_RUN_DIR/gpus-seen"
exec {real} "$@"
"""


def test_a_local_run_sees_the_gpus_orch_sees(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """submitit's local executor sets CUDA_VISIBLE_DEVICES to the GPUs it was asked for, "" for
    none: on the lent H200 every run of the device check was refused ("device 'cuda' is not
    available"). A local run is shown what orch was: the caller's variable, or none at all."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = write(workdir / "bin" / "python", RECORDING_PYTHON.format(real=sys.executable))
    fake.chmod(0o755)
    write(workdir / "mysites" / "one.yaml", SITE.format(name="one", python=fake, extra=""))
    env = {"ORCH_LOCAL_CORES_DIR": str(workdir / "ledger")}
    seen = {}
    for name, extra in (("unset", {}), ("two", {"CUDA_VISIBLE_DEVICES": "0,1"})):
        sweep = write(workdir / f"{name}.yaml", ONE_RUN.format(name=name, walltime="00:05:00", tag=name))
        proc = run_orch("--sites-dir", str(workdir / "mysites"), "run", str(sweep), "--interval", "0.5",
                        cwd=workdir, env={**env, **extra})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (run_dir,) = [r["run_dir"] for r in _attempts(workdir, env) if r["sweep"] == name]
        seen[name] = (Path(run_dir) / "gpus-seen").read_text().strip()
    assert seen == {"unset": "unset", "two": "0,1"}
