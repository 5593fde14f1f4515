"""What submitit's local executor runs for a job: the rendered batch script, under bash.

Runs in the job's own process (pickled by reference, so it must stay importable and
small). Before the script starts, the job queues for its cores in the machine-wide
ledger (:mod:`orchestrator.run.executors.local_cores`): a run of N processes holds N cores,
its processes are pinned to them and get ``cores // N`` threads each. The walltime
counts from that moment, not from submission, so it is enforced here rather than by
submitit. The script runs in its own process group so a walltime kill or a cancel
stops every process it started, not just bash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.run.executors.local_cores import CoreLedger, Grant

# Where each job's end is written, as JSON, beside the executor's folder of started files.
RESULTS_DIR = "results"
# A result is a few hundred bytes.
RESULT_LIMIT = 64 * 1024

# What the script's processes read for their thread pools (torch reads OMP and MKL).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _log(run_path: Path, line: str) -> None:
    with open(run_path / "stderr.log", "a") as err:
        err.write(f"orch: {line}\n")


def _group_running(pgid: int) -> bool:
    """True while a process of group ``pgid`` other than a zombie (an unreaped bash) lives."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _stop_group(pgid: int) -> None:
    """SIGTERM the script's process group, then SIGKILL what is still there after 2 s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and _group_running(pgid):
            time.sleep(0.05)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def script_env(grant: Grant) -> dict[str, str]:
    """The job's environment plus its cores (``ORCH_CORES``) and each process's thread count."""
    env = dict(os.environ)
    env["ORCH_CORES"] = ",".join(str(core) for core in grant.cores)
    for name in THREAD_VARIABLES:
        env[name] = str(grant.threads)
    return env


def run_batch_script(script: str, run_dir: str, marker: str | None = None, *, walltime_s: float | None = None,
                     processes: int = 1, capacity: int | None = None, exclusive: bool = True,
                     started_dir: str | None = None) -> dict[str, Any]:
    """Wait for cores, run ``bash script`` in ``run_dir``; return its exit code and how it ended.

    ``started_dir``: where ``<job id>`` is written when the run gets its cores (the
    executor reports the job pending until then).
    """
    job_id = ""
    if marker or started_dir:
        import submitit

        pid = submitit.JobEnvironment().job_id  # the controller's pid, the executor adds its start time
        job_id = f"{pid}-{_proc_start(int(pid)) or 0}"
    results_dir = Path(started_dir).parent / RESULTS_DIR if started_dir else None
    try:
        result = _run(script, run_dir, marker, job_id, walltime_s=walltime_s, processes=processes,
                      capacity=capacity, exclusive=exclusive, started_dir=started_dir)
    except BaseException as exc:
        if results_dir is not None:
            _write_result(results_dir, job_id, {"error": f"{type(exc).__name__}: {exc}"[:500]})
        raise
    if results_dir is not None:
        _write_result(results_dir, job_id, result)
    return result


def _run(script: str, run_dir: str, marker: str | None, job_id: str, *, walltime_s: float | None,
         processes: int, capacity: int | None, exclusive: bool, started_dir: str | None) -> dict[str, Any]:
    if marker:  # lets `orch status` find this job if the submitting process died
        Path(marker).parent.mkdir(parents=True, exist_ok=True)
        Path(marker).write_text(job_id)
    started_file = Path(started_dir) / job_id if started_dir else None
    if started_file is not None:
        started_file.unlink(missing_ok=True)  # a reused pid's old marker
    run_path = Path(run_dir)
    stopped_by: list[str] = []
    running: list[int] = []  # the script's process group, once started

    def stop(signum: int, _frame: Any) -> None:
        # INT/TERM are cancel (the controller forwards them); USR2 is submitit's own timeout.
        stopped_by.append(signal.Signals(signum).name)
        if running:
            _stop_group(running[0])

    for sig in (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)

    ledger = CoreLedger()
    try:
        grant = ledger.acquire(
            processes, capacity, exclusive=exclusive, job=Path(marker).name if marker else run_path.name,
            should_stop=lambda: bool(stopped_by),
            on_wait=lambda ahead, held, need, of: _log(run_path, f"waiting for {need} of {of} core(s): "
                                                                 f"{ahead} run(s) ahead, {held} core(s) held"))
        if grant is None or stopped_by:
            return _ended(143, stopped_by, None, grant)
        started = _now()
        alone = ("; the machine to itself (the sweep did not say share: true)" if exclusive else
                 f"; needs {processes}, more than the {grant.capacity} local runs may hold: runs alone"
                 if grant.alone else "")
        _log(run_path, f"holds core(s) {','.join(map(str, grant.cores))} ({grant.held} of {grant.capacity}), "
                       f"{grant.threads} thread(s) per process, after waiting {grant.waited_s:.1f} s{alone}")
        os.sched_setaffinity(0, grant.cores)  # the script and everything it starts inherit it
        if started_file is not None:
            started_file.parent.mkdir(parents=True, exist_ok=True)
            started_file.write_text(started)
        with open(run_path / "stdout.log", "ab") as out, open(run_path / "stderr.log", "ab") as err:
            process = subprocess.Popen(["bash", script], cwd=run_dir, stdout=out, stderr=err,
                                       start_new_session=True, env=script_env(grant))
            running.append(process.pid)
            ledger.hold_group(process.pid)  # a kill -9 of this process does not free cores in use
            if stopped_by:  # a signal came while starting
                _stop_group(process.pid)
            try:
                code = process.wait(timeout=walltime_s)
            except subprocess.TimeoutExpired:
                stopped_by.append("walltime")
                _stop_group(process.pid)
                code = process.wait()
        return _ended(code, stopped_by, started, grant)
    finally:
        ledger.release()


def _ended(code: int, stopped_by: list[str], started: str | None, grant: Grant | None) -> dict[str, Any]:
    timed_out = "walltime" in stopped_by or "SIGUSR2" in stopped_by
    return {
        "exit_code": code,
        "timed_out": timed_out,
        "cancelled": bool(stopped_by) and not timed_out,
        "started_at": started,
        "finished_at": _now(),
        "cores": grant.cores if grant else None,
        "cores_held": grant.held if grant else None,
        "threads": grant.threads if grant else None,
        "alone": grant.alone if grant else False,
        "waited_s": grant.waited_s if grant else None,
    }


def _proc_start(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19]


def _write_result(folder: Path, job_id: str, result: dict[str, Any]) -> None:
    """``<folder>/<job id>.json``, whole or not at all (a temporary of its own, renamed)."""
    import json
    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{job_id}.", suffix=".tmp", dir=folder)
    with os.fdopen(fd, "w") as handle:
        json.dump(result, handle)
    os.replace(tmp, folder / f"{job_id}.json")


# What each key of a result may hold (the job can write the file: nothing else is taken).
_OPTIONAL_TEXT = (str, type(None))
_RESULT_TYPES: dict[str, tuple[type, ...]] = {
    "exit_code": (int,), "timed_out": (bool,), "cancelled": (bool,), "started_at": _OPTIONAL_TEXT,
    "finished_at": _OPTIONAL_TEXT, "cores": (list, type(None)), "cores_held": (int, type(None)),
    "threads": (int, type(None)), "alone": (bool,), "waited_s": (int, float, type(None)),
}


def read_result(folder: Path, job_id: str) -> dict[str, Any] | None:
    """The job's result as ``_write_result`` wrote it, or None (none yet). A file that is not one
    (a FIFO, too large, wrong types) is a result saying so, never a traceback or a pickle."""
    import json

    from orchestrator.safefile import read_regular

    if "/" in job_id or job_id.startswith("."):
        return None
    try:
        raw = read_regular(folder / f"{job_id}.json", RESULT_LIMIT)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"error": f"its result file was refused: {exc}"}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {"error": "its result file is not valid JSON"}
    if isinstance(data, dict) and set(data) == {"error"} and isinstance(data["error"], str):
        return {"error": data["error"][:500]}
    if not isinstance(data, dict) or set(data) != set(_RESULT_TYPES):
        return {"error": "its result file is not one orch wrote"}
    for key, kinds in _RESULT_TYPES.items():
        value = data[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return {"error": f"its result file is not one orch wrote ({key})"}
    if data["cores"] is not None and not all(type(c) is int for c in data["cores"]):
        return {"error": "its result file is not one orch wrote (cores)"}
    return data
