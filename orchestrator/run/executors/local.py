"""The ``local`` executor: jobs run on this machine through submitit's LocalExecutor.

The job id is ``<pid>-<start time>`` of submitit's job controller, which outlives ``orch
submit`` and runs in a session of its own (a Ctrl-C of ``orch submit`` does not reach it); the
start time makes it unique where pids are reused. Any later ``orch`` process follows a job from
``/proc`` and from the JSON result orch's wrapper writes (``<folder>/results/<id>.json``,
validated on reading); submitit's pickled result is never loaded (the job could write it).

Jobs are admitted by cores inside the job (:mod:`orchestrator.run.executors.local_job`): a
job whose run still waits for its cores is pending, and ``<folder>/started/<id>`` says
when it got them. The capacity is ``$ORCH_LOCAL_CORES``, else the profile's
``executor: {cores: N}``, else the cores the job may use.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping

import submitit
import submitit.local.local as submitit_local

from orchestrator.errors import UserError
from orchestrator.run.executors.base import (
    EXECUTORS,
    Executor,
    FailureClass,
    JobInfo,
    JobRequest,
    JobState,
    SubmitResult,
)
from orchestrator.run.executors.local_controller import MODULE as CONTROLLER_MODULE
from orchestrator.run.executors.local_controller import SUBMITIT_MODULE
from orchestrator.run.executors.local_cores import CAPACITY_ENV, parse_capacity
from orchestrator.run.executors.local_job import RESULTS_DIR, read_result, run_batch_script
from orchestrator.safefile import read_regular
from orchestrator.sites.schedulers import ExecutorOptions, LocalOptions

# A started file holds one timestamp, a marker one job id: far less than this.
STARTED_FILE_LIMIT = 4096

# submitit's own timeout: never reached, the job enforces the walltime from when it got its cores.
CONTROLLER_TIMEOUT_MIN = 60 * 24 * 365


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of live process ``pid`` (None: gone or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def split_job_id(job_id: str) -> tuple[int, str | None] | None:
    """(controller pid, its start time) from a job id ``<pid>-<start>``; a plain pid (before issue
    53) has no start time; None for anything else."""
    pid, _, start = job_id.partition("-")
    if not pid.isdigit() or (start and not start.isdigit()) or len(job_id) > 40:
        return None
    return int(pid), start or None


def _controller_alive(job_id: str, folder: Path) -> bool:
    """True while the job's submitit controller for ``folder`` lives: its pid, with the start time
    the job id records (pids get reused: on pid_max 32768 within half an hour)."""
    parts = split_job_id(job_id)
    if parts is None:
        return False
    pid, start = parts
    now = _proc_start(pid)
    if now is None or (start is not None and now != start):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return str(folder).encode() in cmdline


@contextlib.contextmanager
def _detached_output() -> Iterator[None]:
    """Controllers started meanwhile get /dev/null as stdout/stderr instead of orch's own.

    submitit's controller inherits them and outlives ``orch submit``: with orch's, a pipe
    read by the caller (``orch submit | cat``, a test's ``subprocess.run``) would stay open
    until the last job ended. The jobs write to their own log files.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def job_environment(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """submitit's controller environment, with the GPUs orch itself sees.

    submitit sets ``CUDA_VISIBLE_DEVICES`` to the GPUs its ``gpus_per_node`` asked for, ""
    for none, which hid every GPU from every local run: on the lent H200 (2026-11-27) all 18
    runs of the device check stopped at "device 'cuda' is not available". A local job runs
    on the whole machine (alone unless its sweep says ``share: true``), so it sees what orch
    sees: the caller's ``CUDA_VISIBLE_DEVICES`` where one is set, else the variable unset.
    """
    if env is None:
        return None
    env = dict(env)
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    else:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _start_controller(cmd: list[str] | str, **kwargs: Any) -> subprocess.Popen[bytes]:
    """submitit's controller command, with orch's quieter controller module, in a new session."""
    if isinstance(cmd, str):  # submitit joins a setup and the command into one shell line
        cmd = cmd.replace(SUBMITIT_MODULE, CONTROLLER_MODULE)
    else:
        cmd = [CONTROLLER_MODULE if part == SUBMITIT_MODULE else part for part in cmd]
    kwargs["env"] = job_environment(kwargs.get("env"))
    return subprocess.Popen(cmd, start_new_session=True, **kwargs)


class _SessionLocalExecutor(submitit.LocalExecutor):
    """submitit's LocalExecutor whose job controllers start in a session of their own.

    By default a controller shares ``orch submit``'s process group, so a Ctrl-C in the
    terminal (SIGINT to the whole group) during a submit also stopped the jobs it had
    started, which were then recorded lost and retried. A local job now outlives its
    submitter as a real scheduler's job does; ``orch cancel`` stops it. The controller is
    :mod:`orchestrator.run.executors.local_controller` (submitit's, polling twice a second).
    """

    # submitit's start_controller calls ``subprocess.Popen`` with no way to pass options, so the
    # module's name is pointed, for that one call, at a Popen that starts a new session.
    _popen = types.SimpleNamespace(Popen=_start_controller)

    def _submit_command(self, command: str) -> submitit_local.LocalJob:
        original = submitit_local.subprocess
        submitit_local.subprocess = self._popen  # type: ignore[assignment]
        try:
            return super()._submit_command(command)
        finally:
            submitit_local.subprocess = original


@EXECUTORS.register("local")
class LocalExecutor(Executor):
    """Runs on this machine (options: :class:`orchestrator.sites.schedulers.LocalOptions`)."""

    options_model: ClassVar[type[ExecutorOptions]] = LocalOptions
    options: LocalOptions

    def __init__(self, folder: Path, options: Mapping[str, Any] | LocalOptions | None = None) -> None:
        super().__init__(Path(folder).resolve(), options)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._jobs: dict[str, submitit.Job] = {}  # keeps Popen handles so zombies are reaped
        self.capacity = self._capacity()

    def _capacity(self) -> int | None:
        """Cores local runs may hold: the environment, then the profile; None: the job's usable cores."""
        try:
            if os.environ.get(CAPACITY_ENV):
                return parse_capacity(os.environ[CAPACITY_ENV], CAPACITY_ENV)
            if self.options.cores is not None:
                return parse_capacity(self.options.cores, "executor.cores")
        except ValueError as exc:
            raise UserError(str(exc)) from None
        return None

    def _marker(self, job_name: str) -> Path:
        return self.folder / "names" / job_name

    def submit(self, requests: list[JobRequest]) -> SubmitResult:
        with _detached_output():
            return SubmitResult(tuple(self._submit(requests)))

    def _submit(self, requests: list[JobRequest]) -> list[str]:
        ids: list[str] = []
        for req in requests:
            executor = _SessionLocalExecutor(folder=self.folder)
            executor.update_parameters(timeout_min=CONTROLLER_TIMEOUT_MIN, signal_delay_s=1,
                                       tasks_per_node=1, nodes=1)
            job = executor.submit(run_batch_script, str(req.script_path), str(req.run_dir),
                                  str(self._marker(req.job_name)), walltime_s=req.walltime_s,
                                  processes=req.nodes * req.tasks_per_node, capacity=self.capacity,
                                  started_dir=str(self.folder / "started"), exclusive=not req.share)
            self._count("submitit.LocalExecutor.submit")
            # The pid alone is no id: a later job gets the same pid (pid_max 32768) and took an
            # earlier job's result. With the controller's start time it names one process ever.
            job_id = f"{job.job_id}-{_proc_start(int(job.job_id)) or 0}"
            self._jobs[job_id] = job
            ids.append(job_id)
        return ids

    def _result(self, job_id: str) -> dict[str, Any] | None:
        """The job's end as its wrapper wrote it (``results/<job id>.json``), validated; None when
        there is none yet. submitit's own ``_result.pkl`` is never read: the job can write it, and
        unpickling runs code."""
        return read_result(self.folder / RESULTS_DIR, job_id)

    def query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        self._count("query")
        infos: dict[str, JobInfo] = {}
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is not None:
                job.done()  # polls the Popen handle, reaping a finished controller
            result = self._result(job_id)
            if result is None:
                alive = _controller_alive(job_id, self.folder)
                # Check the result once more: the job may have ended between the two looks.
                result = self._result(job_id) if not alive else None
                if result is None:
                    infos[job_id] = (self._info_alive(job_id) if alive else
                                     JobInfo(job_id, JobState.FAILED, FailureClass.LOST,
                                             reason="the job's process ended without a result"))
                    continue
            infos[job_id] = self._info_from_result(job_id, result)
        return infos

    def _info_alive(self, job_id: str) -> JobInfo:
        """Running once the job got its cores (the started file holds when), pending before."""
        try:
            # The job writes this file, so it may be anything: a FIFO in its place once hung every
            # `orch status` (read_regular never waits on one, nor reads past a timestamp's size).
            text = read_regular(self.folder / "started" / job_id, STARTED_FILE_LIMIT)
            started = text.decode(errors="replace").strip()
        except FileNotFoundError:
            return JobInfo(job_id, JobState.PENDING, reason="waiting for cores")
        except OSError as exc:
            return JobInfo(job_id, JobState.RUNNING, node_list="localhost",
                           reason=f"its started file was not read: {exc}")
        return JobInfo(job_id, JobState.RUNNING, node_list="localhost", started_at=started or None)

    def _info_from_result(self, job_id: str, value: dict[str, Any]) -> JobInfo:
        if "error" in value:
            return JobInfo(job_id, JobState.FAILED, FailureClass.LAUNCH_ERROR, reason=value["error"] or "job raised")
        code = value["exit_code"]
        info = JobInfo(job_id, JobState.COMPLETED if code == 0 else JobState.FAILED, exit_code=code,
                       node_list="localhost", started_at=value.get("started_at"),
                       finished_at=value.get("finished_at"))
        info.extra = {key: value[key] for key in ("cores", "threads", "alone", "waited_s") if key in value}
        if value.get("timed_out"):
            info.state, info.failure, info.reason = JobState.FAILED, FailureClass.TIMEOUT, "walltime reached"
        elif value.get("cancelled"):
            info.state, info.failure, info.reason = JobState.FAILED, FailureClass.CANCELLED, "cancelled"
        elif code in (128 + signal.SIGKILL, -signal.SIGKILL):
            # Killed with SIGKILL, and not by orch (a cancel or the walltime are above): on a
            # machine without a scheduler that is the kernel's out-of-memory killer.
            info.failure = FailureClass.OUT_OF_MEMORY
            info.reason = (f"killed by SIGKILL (exit {code}): most likely the kernel's out-of-memory killer "
                           "(the run needed more host memory than was free)")
        elif code != 0:
            info.failure, info.reason = FailureClass.FAILED, f"script exited with {code}"
        return info

    def cancel(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            parts = split_job_id(job_id)
            if parts is not None and _controller_alive(job_id, self.folder):
                os.kill(parts[0], signal.SIGTERM)  # the controller forwards it to the job

    def wait_stopped(self, job_ids: list[str], timeout_s: float = 20.0) -> list[str]:
        """Wait for these jobs' controllers to exit (each stops its job's processes first);
        returns the ids still alive at the timeout."""
        deadline = time.monotonic() + timeout_s
        alive = [j for j in job_ids if split_job_id(j) is not None]
        while True:
            alive = [j for j in alive if _controller_alive(j, self.folder)]
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.1)

    def find_by_name(self, job_names: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for name in job_names:
            try:  # the job writes its marker too: read like the started file
                text = read_regular(self._marker(name), STARTED_FILE_LIMIT)
            except OSError:
                continue
            found[name] = text.decode(errors="replace").strip()
        return found
