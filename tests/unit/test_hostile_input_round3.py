"""Hostile input, round 3 (issue 53, part A): what a job, another user or a mistyped path can
write is never trusted -- no pickle loaded, no pid signalled, no path followed or deleted
without checks -- and every user-supplied name is checked for its type before use."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import SourceError
from orchestrator.plan.sweep import parse_sweep

SWEEP = """\
name: demo
experiments:
  - name: e
    workload: gemm
    sites: [local]
    walltime: 10
    grid: {devices: [1], m: 64}
"""


# ---------------------------------------------------------------- names of every type (real use 4)

@pytest.mark.parametrize("name", ["[a, b]", "{a: 1}", "1", "true", "null"])
def test_an_experiment_name_that_is_not_text_with_a_variant_is_a_clear_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.replace("name: e", f"name: {name}") + "variants:\n  tiny: {walltime: 5}\n")
    with pytest.raises(SourceError) as info:
        parse_sweep(path, variant="tiny")
    assert "experiments[0].name" in str(info.value) or "experiments.0.name" in str(info.value)
    assert f"{path}:3" in str(info.value)


@pytest.mark.parametrize("name", ["[a]", "{a: 1}", "3", "true"])
def test_a_sweep_name_that_is_not_text_with_a_variant_is_a_clear_error(tmp_path: Path, name: str) -> None:
    # Once stringified into "3-tiny" (planned under a name never written) or "['a']-tiny".
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.replace("name: demo", f"name: {name}") + "variants:\n  tiny: {walltime: 5}\n")
    with pytest.raises(SourceError) as info:
        parse_sweep(path, variant="tiny")
    assert str(info.value).startswith(f"{path}:1: name: expected the sweep's name (text)")


# ---------------------------------------------------------------- orch follow: the pid file

def _follower_file(state: Path, **fields: object) -> Path:
    state.mkdir(parents=True, exist_ok=True)
    data = {"pid": 0, "started_at": "2026-01-01T00:00:00+00:00", "proc_start": None,
            "args": ["status", "--watch"], "log": str(state / "follower.log"), "cwd": str(state)}
    data.update(fields)
    path = state / "follower.json"
    path.write_text(json.dumps(data))
    return path


def _orch(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    from tests.conftest import run_orch

    return run_orch(*args, cwd=tmp_path, env={"ORCH_HOME": str(tmp_path / "home")}, timeout=timeout)


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def test_follow_stop_signals_no_process_the_pid_file_names_unless_it_is_the_follower(tmp_path: Path) -> None:
    """A pid file a job rewrote once made `orch follow stop` kill any process (-1: every one the
    user may signal; 0: orch's own group). Only the follower `follow start` recorded is signalled."""
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        state = tmp_path / "home"
        # The bystander's own pid and start time: only its command line says it is no follower.
        for pid, start in ((bystander.pid, _start_time(bystander.pid)), (bystander.pid, None),
                           (os.getpid(), _start_time(os.getpid()))):
            _follower_file(state, pid=pid, proc_start=start)
            proc = _orch(tmp_path, "follow", "stop")
            assert proc.returncode == 0 and "no follower is running" in proc.stdout, proc.stderr
            assert bystander.poll() is None, "the bystander was signalled"
        for bad in (-1, 0, 1, True, "12", 2 ** 70, 1.5):
            _follower_file(state, pid=bad)
            proc = _orch(tmp_path, "follow", "stop")
            assert proc.returncode != 0 and "Traceback" not in proc.stderr
            assert proc.stderr.startswith("error: ") and "pid" in proc.stderr and "no process was signalled" in \
                proc.stderr, proc.stderr
            assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("kind", ["fifo", "zero", "huge", "list", "deep", "types"])
def test_a_bad_follower_file_is_one_line_not_a_traceback_hang_or_memory_error(tmp_path: Path, kind: str) -> None:
    state = tmp_path / "home"
    state.mkdir(parents=True)
    path = state / "follower.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        path.write_text('{"pid": "' + "x" * (8 << 20) + '"}')
    elif kind == "list":
        path.write_text("[1, 2]")
    elif kind == "deep":
        path.write_text("[" * 50_000)
    else:
        _follower_file(state, args="status", log=5)
    for command in ("stop", "status"):
        proc = _orch(tmp_path, "follow", command, timeout=30)
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}:"), proc.stderr


# ---------------------------------------------------------------- writes never through a planted link

def test_follow_start_writes_through_no_planted_link(tmp_path: Path) -> None:
    """`follower.tmp` and `follower.log` planted as links to a file of the user's were written
    through (the pid file's JSON into it, or the log appended to it)."""
    from orchestrator.run import detach

    state = tmp_path / "state"
    state.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (state / "follower.tmp").symlink_to(victim)
    follower = detach.start(state, ["--version"], dict(os.environ), tmp_path)
    try:
        assert victim.read_text() == "precious\n"
        assert not (state / "follower.json").is_symlink() and detach.read(state) == follower
    finally:
        detach.stop(state, timeout_s=5)
    (state / "follower.log").unlink()
    (state / "follower.log").symlink_to(victim)
    with pytest.raises(RuntimeError, match="follower.log: cannot write the follower's log"):
        detach.start(state, ["--version"], dict(os.environ), tmp_path)
    assert victim.read_text() == "precious\n"


def test_calibration_writes_through_no_planted_link(tmp_path: Path) -> None:
    from orchestrator.safefile import replace_file

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "calibration.yaml"
    target.with_suffix(".yaml.tmp").symlink_to(victim)
    replace_file(target, b"entries: []\n")
    assert victim.read_text() == "precious\n" and target.read_text() == "entries: []\n"
    assert not any(p.name.startswith(".calibration") for p in tmp_path.iterdir())


# ---------------------------------------------------------------- orch export deletes nothing

@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root (CI runs as root)")
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_export_whose_write_fails_deletes_no_device_node(tmp_path: Path, fmt: str) -> None:
    """Exporting to /dev/full as root removed the device node (pyarrow deletes a failed output)."""
    (tmp_path / "s.yaml").write_text(SWEEP)
    assert _orch(tmp_path, "plan", str(tmp_path / "s.yaml")).returncode == 0
    full = tmp_path / "full"
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # the same device as /dev/full
    proc = _orch(tmp_path, "export", "--view", "runs", "--format", fmt, "-o", str(full))
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: --output {full}: cannot write"), proc.stderr
    assert stat.S_ISCHR(full.lstat().st_mode), "the device node was removed"


def test_export_replaces_an_existing_file_whole(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SWEEP)
    assert _orch(tmp_path, "plan", str(tmp_path / "s.yaml")).returncode == 0
    out = tmp_path / "runs.parquet"
    out.write_text("old")
    proc = _orch(tmp_path, "export", "--view", "runs", "--format", "parquet", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".runs")) == []


# ---------------------------------------------------------------- orch sql stays read-only

@pytest.mark.parametrize("query", [
    "BEGIN READ WRITE; CREATE TABLE planted (x int); COMMIT",
    "COMMIT; BEGIN READ WRITE; CREATE TABLE planted (x int); COMMIT",
    "SELECT 1; CREATE TABLE planted (x int)",
    "SET default_transaction_read_only = off; CREATE TABLE planted (x int)",
])
def test_sql_without_write_changes_nothing_through_several_statements(tmp_path: Path, db_url: str,
                                                                      query: str) -> None:
    """On PostgreSQL, `BEGIN READ WRITE; ...; COMMIT` committed a table without --write."""
    from tests.conftest import run_orch

    env = {"ORCH_HOME": str(tmp_path / "home"), "ORCH_DB_URL": db_url}
    (tmp_path / "s.yaml").write_text(SWEEP)
    assert run_orch("plan", str(tmp_path / "s.yaml"), cwd=tmp_path, env=env).returncode == 0
    proc = run_orch("sql", query, cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: "), proc.stderr
    # SQLite's parser refuses some of these texts before it sees a second statement.
    assert "one statement" in proc.stderr or (db_url.startswith("sqlite") and "syntax error" in proc.stderr)
    check = run_orch("sql", "--format", "json", "SELECT count(*) AS n FROM runs", cwd=tmp_path, env=env)
    assert json.loads(check.stdout) == [{"n": 1}]
    tables = run_orch("sql", "--write", "SELECT * FROM planted", cwd=tmp_path, env=env)
    assert tables.returncode == 2 and "planted" in tables.stderr, "a table was created without --write"


# ---------------------------------------------------------------- local jobs: no pickle, no reused id

class _Planted:
    """Unpickling this creates the file it names: code run inside orch."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.path}",))


def test_a_job_written_pickle_is_never_loaded(tmp_path: Path) -> None:
    import pickle

    from orchestrator.run.executors import JobState
    from orchestrator.run.executors.local import LocalExecutor

    executor = LocalExecutor(tmp_path / "jobs")
    sentinel = tmp_path / "ran"
    for job_id in ("4242", "4242-99"):
        (executor.folder / f"{job_id}_0_result.pkl").write_bytes(pickle.dumps(_Planted(sentinel)))
        info = executor.query([job_id])[job_id]
        assert not sentinel.exists(), "a pickle the job wrote was loaded"
        assert info.state == JobState.FAILED and info.reason == "the job's process ended without a result"


def test_a_result_of_an_earlier_job_with_the_same_pid_is_not_taken(tmp_path: Path) -> None:
    """On pid_max 32768 a new job got an earlier job's pid and took its result at the first poll."""
    from orchestrator.run.executors import JobState
    from orchestrator.run.executors.local import LocalExecutor
    from orchestrator.run.executors.local_job import RESULTS_DIR, _write_result

    executor = LocalExecutor(tmp_path / "jobs")
    earlier = {"exit_code": 0, "timed_out": False, "cancelled": False, "started_at": None, "finished_at": None,
               "cores": [0], "cores_held": 1, "threads": 1, "alone": True, "waited_s": 0.0}
    _write_result(executor.folder / RESULTS_DIR, "4242-100", earlier)
    assert executor.query(["4242-100"])["4242-100"].state == JobState.COMPLETED
    assert executor.query(["4242-200"])["4242-200"].state == JobState.FAILED  # same pid, a later job


@pytest.mark.parametrize("text", ["[1]", '{"exit_code": "0"}', "{" * 50_000, '{"error": 5}'])
def test_a_bad_result_file_is_a_failed_job_not_a_traceback(tmp_path: Path, text: str) -> None:
    from orchestrator.run.executors import JobState
    from orchestrator.run.executors.local import LocalExecutor
    from orchestrator.run.executors.local_job import RESULTS_DIR

    executor = LocalExecutor(tmp_path / "jobs")
    (executor.folder / RESULTS_DIR).mkdir()
    (executor.folder / RESULTS_DIR / "4242-1.json").write_text(text)
    info = executor.query(["4242-1"])["4242-1"]
    assert info.state == JobState.FAILED and "result file" in (info.reason or "")


# ---------------------------------------------------------------- submit without qsub (real use 2)

def test_submit_where_qsub_is_not_on_path_exits_1_and_the_run_stays_plannable(tmp_path: Path) -> None:
    """It printed "submitted 0 run(s); 1 refused", exited 0 and failed the run for good."""
    from tests.conftest import run_orch

    bare = tmp_path / "bin"  # python and orch only: no qsub, wherever the machine has one
    bare.mkdir()
    env = {"ORCH_HOME": str(tmp_path / "home"), "ORCH_ACCOUNT": "acct",
           "PATH": f"{bare}:{Path(sys.executable).parent}:/usr/bin:/bin"}
    if any((Path(d) / "qsub").exists() for d in env["PATH"].split(":")):
        pytest.skip("qsub is in /usr/bin or /bin here")
    (tmp_path / "s.yaml").write_text(SWEEP.replace("sites: [local]", "sites: [polaris]"))
    assert run_orch("plan", str(tmp_path / "s.yaml"), cwd=tmp_path, env=env).returncode == 0
    proc = run_orch("submit", cwd=tmp_path, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    assert "qsub" in proc.stderr
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT status FROM runs", cwd=tmp_path, env=env).stdout)
    assert rows == [{"status": "planned"}]
    attempts = run_orch("sql", "-f", "json", "SELECT count(*) AS n FROM attempts", cwd=tmp_path, env=env).stdout
    assert json.loads(attempts) == [{"n": 0}]


# ---------------------------------------------------------------- the core ledger

@pytest.fixture(scope="module")
def other_user() -> str:
    """A user other than the one running orch, to plant files as (created once, as root)."""
    if os.geteuid() != 0:
        pytest.skip("creating a user needs root (CI runs as root)")
    name = "orchplant"
    if subprocess.run(["id", name], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    return name


def _as(user: str, *command: str) -> None:
    subprocess.run(["runuser", "-u", user, "--", *command], check=True)


def test_a_ledger_another_user_planted_is_not_used_and_changes_nothing(tmp_path: Path, other_user: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's symbolic link as `lock` made a root job chmod a 0600 file to 0666."""
    import shutil
    import tempfile

    from orchestrator.run.executors.local_cores import DIR_ENV

    shared = Path(tempfile.mkdtemp(prefix="orch-shared-", dir="/tmp"))  # like /tmp: the other user reaches it
    shared.chmod(0o1777)
    request_cleanup = shutil.rmtree
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.delenv(DIR_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    try:
        _planted_ledger(tmp_path, other_user, shared)
    finally:
        request_cleanup(shared, ignore_errors=True)


def _planted_ledger(tmp_path: Path, other_user: str, shared: Path) -> None:
    from orchestrator.run.executors.local_cores import CoreLedger, UnsafeLedger, ledger_dir

    victim = tmp_path / "secret"
    victim.write_text("key\n")
    victim.chmod(0o600)
    folder = ledger_dir()
    assert folder.parent == shared
    _as(other_user, "mkdir", "-m", "1777", str(folder))
    _as(other_user, "ln", "-s", str(victim), str(folder / "lock"))
    with pytest.raises(UnsafeLedger, match="must be yours"):
        CoreLedger().acquire(1)
    assert victim.stat().st_mode & 0o777 == 0o600


def test_a_planted_lock_link_in_the_users_own_ledger_is_not_followed(tmp_path: Path) -> None:
    from orchestrator.run.executors.local_cores import CoreLedger

    victim = tmp_path / "secret"
    victim.write_text("key\n")
    victim.chmod(0o600)
    (tmp_path / "ledger").mkdir(mode=0o700)
    (tmp_path / "ledger" / "lock").symlink_to(victim)
    with pytest.raises(OSError):
        CoreLedger(tmp_path / "ledger").acquire(1)
    assert victim.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("state", [
    '{"next": "x"}', '{"waiting": [{"ticket": "a", "pid": 1}]}', '{"holding": 5}', "[1]", "{" * 10_000,
    '{"waiting": [{"pid": true, "ticket": 1, "start": null}]}',
])
def test_a_corrupt_ledger_state_is_reset_with_a_warning(tmp_path: Path, state: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A bad state.json failed every local run (or made every run wait for ever)."""
    from orchestrator.run.executors.local_cores import CoreLedger

    folder = tmp_path / "ledger"
    folder.mkdir(mode=0o700)
    (folder / "state.json").write_text(state)
    ledger = CoreLedger(folder)
    grant = ledger.acquire(1, capacity=1, should_stop=_after(5.0))
    assert grant is not None and grant.held == 1
    ledger.release()
    if state.startswith("{") and len(state) < 100:
        assert "started afresh" in capsys.readouterr().err


def _after(seconds: float):  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() > deadline
