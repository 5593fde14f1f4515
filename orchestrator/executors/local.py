"""The ``local`` executor: jobs run on this machine through submitit's LocalExecutor.

The job id is the pid of submitit's job controller, which outlives ``orch submit``.
Any later ``orch`` process can follow a job from the files submitit writes
(``<folder>/<id>_0_result.pkl``) and from ``/proc``.
"""

from __future__ import annotations

import os
import pickle
import signal
from pathlib import Path

import submitit

from orchestrator.executors.base import Executor, FailureClass, JobInfo, JobRequest, JobState
from orchestrator.executors.local_job import run_batch_script


def _controller_alive(pid: int, folder: Path) -> bool:
    """True while ``pid`` is a live submitit controller for ``folder`` (pids get reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return str(folder).encode() in cmdline


class LocalExecutor(Executor):
    scheduler = "local"

    def __init__(self, folder: Path, options: dict | None = None) -> None:
        super().__init__(Path(folder).resolve(), options)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._jobs: dict[str, submitit.Job] = {}  # keeps Popen handles so zombies are reaped

    def _marker(self, job_name: str) -> Path:
        return self.folder / "names" / job_name

    def submit(self, requests: list[JobRequest]) -> list[str]:
        ids: list[str] = []
        for req in requests:
            # Ask for USR2 a little before the end, so the script is stopped cleanly.
            delay = max(2, min(30, req.walltime_s // 20))
            executor = submitit.LocalExecutor(folder=self.folder)
            executor.update_parameters(timeout_min=(req.walltime_s + delay) / 60, signal_delay_s=delay,
                                       tasks_per_node=1, nodes=1)
            job = executor.submit(run_batch_script, str(req.script_path), str(req.run_dir),
                                  str(self._marker(req.job_name)))
            self._count("submitit.LocalExecutor.submit")
            self._jobs[job.job_id] = job
            ids.append(job.job_id)
        return ids

    def _result(self, job_id: str) -> tuple[str, object] | None:
        path = self.folder / f"{job_id}_0_result.pkl"
        if not path.exists():
            return None
        try:
            with path.open("rb") as handle:
                return pickle.load(handle)
        except (EOFError, pickle.UnpicklingError):
            return None  # still being written

    def query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        self._count("query")
        infos: dict[str, JobInfo] = {}
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is not None:
                job.done()  # polls the Popen handle, reaping a finished controller
            result = self._result(job_id)
            if result is None:
                alive = job_id.isdigit() and _controller_alive(int(job_id), self.folder)
                # Check the result once more: the job may have ended between the two looks.
                result = self._result(job_id) if not alive else None
                if result is None:
                    infos[job_id] = (JobInfo(job_id, JobState.RUNNING, node_list="localhost") if alive else
                                     JobInfo(job_id, JobState.FAILED, FailureClass.LOST,
                                             reason="the job's process ended without a result"))
                    continue
            infos[job_id] = self._info_from_result(job_id, result)
        return infos

    def _info_from_result(self, job_id: str, result: tuple[str, object]) -> JobInfo:
        outcome, value = result
        if outcome != "success" or not isinstance(value, dict):
            return JobInfo(job_id, JobState.FAILED, FailureClass.LAUNCH_ERROR,
                           reason=str(value).strip().splitlines()[-1] if value else "job raised")
        code = int(value["exit_code"])
        info = JobInfo(job_id, JobState.COMPLETED if code == 0 else JobState.FAILED, exit_code=code,
                       node_list="localhost", started_at=value.get("started_at"),
                       finished_at=value.get("finished_at"))
        if value.get("timed_out"):
            info.state, info.failure, info.reason = JobState.FAILED, FailureClass.TIMEOUT, "walltime reached"
        elif value.get("cancelled"):
            info.state, info.failure, info.reason = JobState.FAILED, FailureClass.CANCELLED, "cancelled"
        elif code != 0:
            info.failure, info.reason = FailureClass.FAILED, f"script exited with {code}"
        return info

    def cancel(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            if job_id.isdigit() and _controller_alive(int(job_id), self.folder):
                os.kill(int(job_id), signal.SIGTERM)  # the controller forwards it to the job

    def find_by_name(self, job_names: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for name in job_names:
            marker = self._marker(name)
            if marker.exists():
                found[name] = marker.read_text().strip()
        return found
