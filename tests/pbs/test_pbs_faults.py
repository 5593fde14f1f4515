"""orch on a PBS server that misbehaves as real ones were seen to (the emulator in its fault
modes): a qstat that drops operands, a qsub that answers after orch gave up on it. No run may be
marked lost, executed twice or left queued behind a cancel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_orch, write
from tests.pbs.trivial import executions, make_site, sweep_text


def orch(workdir: Path, *args: str, env: dict[str, str] | None = None, check: bool = False,
         timeout: float = 180) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k.startswith("PBS_EMU_")}
    full.update({"ORCH_SITES_PATH": str(workdir / "sites"), "PATH": os.environ["PATH"], **(env or {})})
    return run_orch(*args, cwd=workdir, env=full, check=check, timeout=timeout)


def sql(workdir: Path, query: str) -> list[dict]:
    return json.loads(orch(workdir, "sql", "-f", "json", query, check=True).stdout)


def test_orch_run_with_a_server_dropping_operands(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three arrays in flight, qstat answering only the first operand of each batched query: every
    run is followed to its end, none is lost or submitted twice; then one operand per call."""
    monkeypatch.setenv("PBS_EMU_DROP_OPERANDS", "1")
    monkeypatch.setenv("PBS_EMU_SLOTS", "1")
    make_site(tmp_path, sleep=0.3, array_size=2)
    sweep = write(tmp_path / "drop.yaml", sweep_text("drop", 6))
    # A job PBS cannot be asked about would be lost after 2 s: none may be.
    proc = orch(tmp_path, "run", str(sweep), "--interval", "0.3", env={"ORCH_LOST_AFTER_S": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = sql(tmp_path, "SELECT r.id, r.status, count(a.id) AS attempts FROM runs r JOIN attempts a "
                         "ON a.run_id = r.id GROUP BY r.id, r.status")
    assert len(runs) == 6 and all(r["status"] == "finished" and r["attempts"] == 1 for r in runs), runs
    assert sorted(executions(tmp_path).values()) == [1] * 6
    assert len(pbs.calls("qsub")) == 3
    attempts = sql(tmp_path, "SELECT job_id, state, reason, failure_class, started_at, finished_at, node_list "
                             "FROM attempts ORDER BY job_id")
    assert all(a["state"] == "completed" and a["failure_class"] is None for a in attempts)
    # No pending comment ("Not Running: ...") survives as the reason of a completed attempt.
    assert all(a["reason"] is None for a in attempts), attempts
    # One slot: a subjob started after its sibling ended, not at the array's start.
    by_array: dict[str, list[dict]] = {}
    for a in attempts:
        by_array.setdefault(a["job_id"].split("[")[0], []).append(a)
    for pair in by_array.values():
        first, second = sorted(pair, key=lambda a: a["job_id"])
        assert second["started_at"][:19] >= first["finished_at"][:19], pair
    # The drop was seen and remembered for later orch processes: one operand per call after it.
    assert (tmp_path / ".orch" / "jobs" / "pbstrivial" / "qstat-one-operand").exists()
    queries = [c for c in pbs.calls("qstat") if c[1:6] == ["-x", "-t", "-f", "-F", "json"]]
    first_batch = next(i for i, c in enumerate(queries) if len(c) > 7)
    assert all(len(c) == 7 for c in queries[first_batch + 1:] if c not in queries[:first_batch + 1])


def test_orch_cancel_with_a_server_dropping_operands(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`orch cancel` stops every job of the sweep (running and queued, in every array) and the runs
    end cancelled, with qstat dropping operands all along."""
    monkeypatch.setenv("PBS_EMU_DROP_OPERANDS", "1")
    monkeypatch.setenv("PBS_EMU_SLOTS", "1")
    make_site(tmp_path, sleep=60, array_size=2)
    sweep = write(tmp_path / "stop.yaml", sweep_text("stop", 4))
    orch(tmp_path, "plan", str(sweep), check=True)
    orch(tmp_path, "submit", "--sweep", "stop", check=True)
    orch(tmp_path, "status", "--sweep", "stop", check=True)  # sees the drop, goes one operand per call
    deadline = time.time() + 30
    while not executions(tmp_path) and time.time() < deadline:
        time.sleep(0.2)
    orch(tmp_path, "cancel", "--sweep", "stop", check=True)
    proc = orch(tmp_path, "status", "--sweep", "stop", "--watch", "--interval", "0.3", env={"ORCH_LOST_AFTER_S": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = sql(tmp_path, "SELECT r.status, a.state, a.failure_class FROM runs r JOIN attempts a ON a.run_id = r.id")
    assert len(runs) == 4 and all((r["state"], r["failure_class"]) == ("failed", "cancelled") for r in runs), runs
    # Nothing left queued or running on the server; nothing submitted twice.
    pbs.wait_all(timeout=30)
    assert len(pbs.calls("qsub")) == 2
    assert sum(executions(tmp_path).values()) <= 1


def wrap_qsub(pbs, body: str) -> None:
    """Put a shell script in front of the emulator's qsub; ``{real}`` in ``body`` is the real one."""
    real = pbs.bin / "qsub-real"
    (pbs.bin / "qsub").rename(real)
    write(pbs.bin / "qsub", "#!/bin/sh\n" + body.format(real=real)).chmod(0o755)


def test_a_qsub_that_answers_late_is_not_submitted_twice(pbs, tmp_path: Path) -> None:
    """`orch submit` killed (-9) while its qsub hangs: the qsub is given up on (timeout) before the
    grace hands the run back to `planned`, so a late success cannot duplicate the run."""
    first = tmp_path / "first-qsub"
    wrap_qsub(pbs, f"# The first qsub hangs 12 s, then submits.\n"
                   f"if [ ! -e {first} ]; then : > {first}; sleep 12; fi\nexec {{real}} \"$@\"\n")
    make_site(tmp_path)
    sweep = write(tmp_path / "late.yaml", sweep_text("late", 1))
    env = {"ORCH_SUBMIT_GRACE_S": "3"}  # the qsub timeout follows: 1.5 s
    orch(tmp_path, "plan", str(sweep), check=True, env=env)
    full = {**os.environ, "ORCH_SITES_PATH": str(tmp_path / "sites"), **env}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "submit", "--sweep", "late"], cwd=tmp_path,
                            env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while not first.exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 40
    while time.time() < deadline:  # repair: found by name, or handed back after the grace
        orch(tmp_path, "status", "--sweep", "late", check=True, env=env)
        if sql(tmp_path, "SELECT count(*) AS n FROM attempts WHERE job_id IS NULL") == [{"n": 0}]:
            break
        time.sleep(0.5)
    orch(tmp_path, "submit", "--sweep", "late", check=True, env=env)
    time.sleep(max(0.0, 13 - (time.time() - first.stat().st_mtime)))  # past the hung qsub's 12 s
    orch(tmp_path, "status", "--sweep", "late", "--watch", "--interval", "0.3", check=True, env=env)
    assert len(list((pbs.home / "jobs").glob("*.json"))) == 1  # one job ever reached the server
    assert sorted(executions(tmp_path).values()) == [1]
    assert sql(tmp_path, "SELECT status FROM runs") == [{"status": "finished"}]


def test_an_intent_is_never_handed_back_while_the_server_cannot_be_asked(pbs, tmp_path: Path) -> None:
    """qsub reaches the server but answers after orch gave up on it (the intent stays, the job
    runs); past the grace the server is down: `orch status` must not hand the run back to be
    submitted again, and says why; once the server answers, the job is found and ran once."""
    wrap_qsub(pbs, '# Submits, then stays silent past orch\'s timeout.\n{real} "$@"\nsleep 5\n')
    make_site(tmp_path)
    sweep = write(tmp_path / "silent.yaml", sweep_text("silent", 1))
    env = {"ORCH_SUBMIT_GRACE_S": "3"}  # the qsub timeout follows: 1.5 s
    orch(tmp_path, "plan", str(sweep), check=True, env=env)
    orch(tmp_path, "submit", "--sweep", "silent", check=True, env=env)
    assert sql(tmp_path, "SELECT count(*) AS n FROM attempts WHERE job_id IS NULL") == [{"n": 1}]
    (pbs.home / "down").touch()  # every client call fails with errno 15010
    time.sleep(3.5)  # past the grace
    proc = orch(tmp_path, "status", "--sweep", "silent", check=True, env=env)
    assert "1 run(s) stay 'submitting'" in proc.stderr and "Traceback" not in proc.stderr
    rows = sql(tmp_path, "SELECT r.status, a.job_id, a.reason FROM runs r JOIN attempts a ON a.run_id = r.id")
    assert [(r["status"], r["job_id"]) for r in rows] == [("submitting", None)], rows
    assert "qstat could not say" in rows[0]["reason"], rows
    (pbs.home / "down").unlink()
    orch(tmp_path, "status", "--sweep", "silent", "--watch", "--interval", "0.3", check=True, env=env)
    assert sql(tmp_path, "SELECT status FROM runs") == [{"status": "finished"}]
    assert len(list((pbs.home / "jobs").glob("*.json"))) == 1  # one job ever reached the server
    assert sorted(executions(tmp_path).values()) == [1]


def test_submit_grace_outlasts_the_submit_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """An intent is handed back to `planned` only after any qsub or sbatch for it has been given up
    on, by a margin: the grace is derived from the commands' timeout, for both schedulers."""
    from orchestrator.run.executors.base import submit_window
    from orchestrator.run.executors.pbs.plugin import qsub_timeout_s
    from orchestrator.run.follow import submit_grace

    monkeypatch.delenv("ORCH_SUBMIT_GRACE_S", raising=False)
    timeout, grace = submit_window()
    assert submit_grace().total_seconds() == grace >= timeout + 60 and qsub_timeout_s() == timeout
    code = ("import sys; from orchestrator.run.executors import slurm; "
            "from orchestrator.run.follow import submit_grace; "
            "g = submit_grace().total_seconds(); sys.exit(0 if g - slurm.SBATCH_TIMEOUT_S >= min(60, g / 2) else 1)")
    for override in (None, "8", "600"):
        env = {k: v for k, v in os.environ.items() if k != "ORCH_SUBMIT_GRACE_S"}
        if override:
            env["ORCH_SUBMIT_GRACE_S"] = override
            monkeypatch.setenv("ORCH_SUBMIT_GRACE_S", override)
            timeout, grace = submit_window()
            assert grace == float(override) and 0 < timeout and grace - timeout >= min(60, grace / 2)
        assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0, override


def test_a_server_that_cannot_be_asked_never_loses_a_run(pbs, tmp_path: Path) -> None:
    """The server down (errno 15010 for every client call) far longer than the lost-after grace: the
    runs wait, then finish when the server answers again."""
    make_site(tmp_path, sleep=10, array_size=2)
    sweep = write(tmp_path / "down.yaml", sweep_text("down", 2))
    env = {"ORCH_LOST_AFTER_S": "1"}
    orch(tmp_path, "plan", str(sweep), check=True, env=env)
    orch(tmp_path, "submit", "--sweep", "down", check=True, env=env)
    (pbs.home / "down").touch()  # qterm: every client call fails with errno 15010
    for _ in range(3):
        time.sleep(1)
        orch(tmp_path, "status", "--sweep", "down", check=True, env=env)
    down = sql(tmp_path, "SELECT r.status, a.failure_class FROM runs r JOIN attempts a ON a.run_id = r.id")
    assert all(r["failure_class"] is None and r["status"] != "failed" for r in down), down
    (pbs.home / "down").unlink()  # restarted, history intact
    orch(tmp_path, "status", "--sweep", "down", "--watch", "--interval", "0.3", check=True, env=env)
    assert [r["status"] for r in sql(tmp_path, "SELECT status FROM runs")] == ["finished", "finished"]


def test_a_job_pbs_does_not_know_is_lost_only_after_the_grace(pbs, tmp_path: Path) -> None:
    """"Unknown Job Id" for the job asked alone: still waited for until the grace has passed."""
    make_site(tmp_path, qsub_args=("-h",))  # held: it never runs, so no exit marker either
    sweep = write(tmp_path / "forgot.yaml", sweep_text("forgot", 1))
    orch(tmp_path, "plan", str(sweep), check=True)
    orch(tmp_path, "submit", "--sweep", "forgot", check=True)
    for path in (pbs.home / "jobs").glob("*.json"):  # the server forgets it
        path.unlink()
    orch(tmp_path, "status", "--sweep", "forgot", check=True, env={"ORCH_LOST_AFTER_S": "300"})
    assert sql(tmp_path, "SELECT status FROM runs") == [{"status": "submitted"}]
    time.sleep(1.5)
    orch(tmp_path, "status", "--sweep", "forgot", check=True, env={"ORCH_LOST_AFTER_S": "1"})
    rows = sql(tmp_path, "SELECT state, failure_class, reason FROM attempts")
    assert (rows[0]["state"], rows[0]["failure_class"]) == ("failed", "lost") and "Unknown Job Id" in rows[0]["reason"]


def test_a_long_submit_keeps_its_intents_while_status_runs(pbs, tmp_path: Path) -> None:
    """One `orch submit` of six jobs whose qsubs take 5 s each (well under the 12 s timeout, even
    on a loaded machine): the last intents wait longer than the 24 s grace for their qsub. An
    `orch status` meanwhile must not hand them back to `planned` (the grace also runs from the
    last qsub started)."""
    wrap_qsub(pbs, 'sleep 5\nexec {real} "$@"\n')
    make_site(tmp_path, array_size=1)  # six plain jobs, six qsubs in a row
    sweep = write(tmp_path / "slow.yaml", sweep_text("slow", 6))
    env = {"ORCH_SUBMIT_GRACE_S": "24"}
    orch(tmp_path, "plan", str(sweep), check=True, env=env)
    full = {**os.environ, "ORCH_SITES_PATH": str(tmp_path / "sites"), **env}
    submit = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "submit", "--sweep", "slow"], cwd=tmp_path,
                              env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.time()
    while submit.poll() is None:
        if time.time() - started > 24.5:
            orch(tmp_path, "status", "--sweep", "slow", check=True, env=env)
        time.sleep(0.3)
    assert submit.returncode == 0
    orch(tmp_path, "status", "--sweep", "slow", "--watch", "--interval", "0.3", check=True, env=env)
    runs = sql(tmp_path, "SELECT r.status, count(a.id) AS attempts FROM runs r JOIN attempts a ON a.run_id = r.id "
                         "GROUP BY r.id, r.status")
    assert runs == [{"status": "finished", "attempts": 1}] * 6, runs
    assert len(list((pbs.home / "jobs").glob("*.json"))) == 6
    assert sorted(executions(tmp_path).values()) == [1] * 6
