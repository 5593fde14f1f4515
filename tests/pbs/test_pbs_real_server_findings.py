"""What a tester found running orch against a real OpenPBS server (issue 30, item 6), each replayed
on the emulator: an outage during submit, a requeued job, an unwritable run directory."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import write
from tests.pbs.test_pbs_faults import orch, sql
from tests.pbs.trivial import executions, make_site, sweep_text


def test_submit_fails_when_no_qsub_reached_the_server(pbs, tmp_path: Path) -> None:
    """Every qsub answered "Connection refused": nothing was submitted, so `orch submit` exits 1 and
    says the scheduler could not be reached (it exited 0 and called the runs held back)."""
    make_site(tmp_path, array_size=1)
    for name in ("out", "json"):
        orch(tmp_path, "plan", str(write(tmp_path / f"{name}.yaml", sweep_text(name, 2))), check=True)
    pbs.home.mkdir(parents=True, exist_ok=True)
    (pbs.home / "down").touch()  # every client call fails: Connection refused (errno 15010)
    proc = orch(tmp_path, "submit", "--sweep", "out")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nothing submitted" in proc.stderr and "could not be reached" in proc.stderr, proc.stderr
    assert "Connection refused" in proc.stderr and "Traceback" not in proc.stderr
    as_json = orch(tmp_path, "submit", "--sweep", "json", "--json")
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    assert not data["submitted"] and len(data["unreached"]) == 2, data
    assert "could not be reached" in data["nothing_submitted"], data


def test_the_outage_reason_goes_once_the_server_answers(pbs, tmp_path: Path) -> None:
    """A submission made during an outage kept "Connection refused" as its reason after the server
    came back; the first poll that gets an answer replaces it."""
    make_site(tmp_path, array_size=1)
    sweep = write(tmp_path / "back.yaml", sweep_text("back", 1))
    env = {"ORCH_SUBMIT_GRACE_S": "600"}  # the intent waits: the reason is what it shows meanwhile
    orch(tmp_path, "plan", str(sweep), check=True, env=env)
    pbs.home.mkdir(parents=True, exist_ok=True)
    (pbs.home / "down").touch()
    orch(tmp_path, "submit", "--sweep", "back", env=env)
    [row] = sql(tmp_path, "SELECT a.state, a.reason FROM attempts a")
    assert row["state"] == "submitting" and "Connection refused" in row["reason"], row
    (pbs.home / "down").unlink()  # the server answers again
    orch(tmp_path, "status", "--sweep", "back", check=True, env=env)
    [row] = sql(tmp_path, "SELECT a.state, a.reason FROM attempts a")
    assert "Connection refused" not in (row["reason"] or ""), row
    assert "the scheduler answered" in row["reason"], row


def _wait(predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.2)


@pytest.mark.measures  # it compares recorded start times within 1.5 s: nothing else may slow the polls
def test_a_requeued_job_records_its_last_start_and_run_count(pbs, tmp_path: Path) -> None:
    """`qrerun` (or a node failure) requeues a running job: orch recorded the first start with the last
    run's elapsed time and no run count. Now started_at is the last start (PBS's stime), consistent
    with elapsed_s and finished_at, and run_count is 2."""
    make_site(tmp_path, sleep=6, array_size=1)
    sweep = write(tmp_path / "again.yaml", sweep_text("again", 1))
    orch(tmp_path, "plan", str(sweep), check=True)
    orch(tmp_path, "submit", "--sweep", "again", check=True)
    _wait(lambda: pbs.record(0)["attrs"]["job_state"] == "R")
    time.sleep(1.5)
    orch(tmp_path, "status", "--sweep", "again", check=True)  # orch sees the first run
    [first] = sql(tmp_path, "SELECT state, started_at FROM attempts")
    assert first["state"] == "running" and first["started_at"], first
    subprocess.run([str(pbs.bin / "qrerun"), "0"], check=True)
    _wait(lambda: pbs.record(0)["attrs"]["job_state"] == "Q" or pbs.record(0)["attrs"].get("run_count") == 2)
    orch(tmp_path, "status", "--sweep", "again", check=True)  # may see it queued again
    orch(tmp_path, "status", "--sweep", "again", "--watch", "--interval", "0.3", check=True)
    attrs = pbs.record(0)["attrs"]
    assert attrs["run_count"] == 2 and attrs["job_state"] == "F", attrs
    [row] = sql(tmp_path, "SELECT a.state, a.started_at, a.finished_at, a.elapsed_s, a.run_count, r.status "
                          "FROM attempts a JOIN runs r ON r.id = a.run_id")
    assert row["status"] == "finished" and row["state"] == "completed" and row["run_count"] == 2, row
    started = datetime.fromisoformat(row["started_at"])
    finished = datetime.fromisoformat(row["finished_at"])
    started = started if started.tzinfo else started.replace(tzinfo=timezone.utc)
    finished = finished if finished.tzinfo else finished.replace(tzinfo=timezone.utc)
    last_start = datetime.strptime(attrs["stime"], "%a %b %d %H:%M:%S %Y").astimezone(timezone.utc)
    assert abs((started - last_start).total_seconds()) < 1.5, (row, attrs["stime"])
    # The last run's elapsed time fits between the recorded start and end (the first start would not).
    assert abs((finished - started).total_seconds() - row["elapsed_s"]) <= 2, row
    assert (started - datetime.fromisoformat(first["started_at"]).replace(tzinfo=timezone.utc)).total_seconds() >= 1
    assert sorted(executions(tmp_path).values()) == [2]  # the program really ran twice


def test_migration_0010_adds_the_run_count(tmp_path: Path) -> None:
    """attempts.run_count comes from migration 0010: after an upgrade the table has the model's columns."""
    from sqlalchemy import inspect

    from orchestrator.results.db.engine import make_engine, upgrade
    from orchestrator.results.db.models import Attempt

    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    upgrade(engine)
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("attempts")}
    assert columns == {c.name for c in Attempt.__table__.columns} and "run_count" in columns
    engine.dispose()


def test_an_unwritable_run_log_is_the_reason_not_the_exit_code(pbs, tmp_path: Path) -> None:
    """The run's stdout.log cannot be written (a directory here: root may write anywhere, so no
    chmod), so the job fails before the program starts: the reason says so, from the job's PBS error
    file, instead of only "script exited with 1"."""
    make_site(tmp_path, array_size=1)
    sweep = write(tmp_path / "ro.yaml", sweep_text("ro", 1))
    orch(tmp_path, "plan", str(sweep), check=True)
    [run] = sql(tmp_path, "SELECT run_dir FROM runs")
    (Path(run["run_dir"]) / "stdout.log").mkdir(parents=True)  # `>>stdout.log` fails: Is a directory
    orch(tmp_path, "submit", "--sweep", "ro", check=True)
    orch(tmp_path, "status", "--sweep", "ro", "--watch", "--interval", "0.3", check=True)
    [row] = sql(tmp_path, "SELECT state, exit_code, reason FROM attempts")
    assert row["state"] == "failed" and row["exit_code"] == 1, row
    assert row["reason"].startswith("script exited with 1: ") and "stdout.log: Is a directory" in row["reason"], row
    assert not executions(tmp_path)  # the program never ran


def test_what_counts_as_not_reaching_the_scheduler() -> None:
    """`orch submit` fails when every submission never reached the scheduler, PBS or Slurm; a command
    that timed out may have reached it (the job may exist), so that does not count."""
    from orchestrator.run.submit import server_unreached

    assert server_unreached("Connection refused\nqsub: cannot connect to server pbs01 (errno=15010)")
    assert server_unreached("sbatch: error: Batch job submission failed: Unable to contact slurm controller "
                            "(connect failure)")
    assert not server_unreached("qsub timed out after 180s")
    assert not server_unreached("sbatch: error: Socket timed out on send/recv operation")
