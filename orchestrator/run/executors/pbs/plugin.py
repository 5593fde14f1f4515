"""The submitit plugin for PBS Pro (entry points group ``submitit``: ``executor`` ->
:class:`PbsExecutor`, ``job_environment`` -> :class:`PbsJobEnvironment`).

With it ``PbsExecutor(folder).submit(fn, ...)`` and ``map_array`` run pickled callables on
PBS Pro like submitit's own Slurm executor: ``qsub`` (``-J 0-(n-1)`` for arrays, a group of
one as a plain job since ``-J`` needs two entries), one batched ``qstat -x -t -f -F json``
per watcher update (:class:`PbsInfoWatcher`; one operand per call once qstat is seen
dropping operands), ``qdel`` to cancel. orch's executor submits its rendered scripts
through the same class (:meth:`PbsExecutor.submit_script`).

PBS does not expand ``%j`` in ``-o``/``-e`` and spools output until the end, so the
submission script writes submitit's logs itself; ``qrerun`` needs operator rights, so
requeue-on-timeout is not offered (a retry is a new submission).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any, Sequence

from submitit.core import core, job_environment, utils

from orchestrator.run.executors.base import FailureClass, JobInfo, JobState, submit_window
from orchestrator.run.executors.pbs.qstat import (
    QSTAT_QUERY,
    QstatResult,
    job_info,
    parse_job_id,
    parse_qstat_json,
    parse_qsub_output,
    pbs_command,
    qstat_jobs,
    qstat_operands,
    salvage_qstat_json,
)


# submitit's CommandFunction would wait forever on a hung qsub; the submit grace of orch's
# follow is derived from the same window (orchestrator.run.executors.base.submit_window).
def qsub_timeout_s() -> float:
    """How long one qsub may run (read when it starts: ``ORCH_SUBMIT_GRACE_S`` changes it)."""
    return submit_window()[0]


_SUBMITIT_STATE = {
    JobState.PENDING: "PENDING",
    JobState.RUNNING: "RUNNING",
    JobState.COMPLETED: "COMPLETED",
    JobState.UNKNOWN: "UNKNOWN",
}
# submitit's state words (Slurm's); PREEMPTED is not used: submitit reads it as "not done",
# and on PBS a checkpointed-and-killed job has ended (nothing requeues it in place).
_SUBMITIT_FAILURE = {
    FailureClass.TIMEOUT: "TIMEOUT",
    FailureClass.OUT_OF_MEMORY: "OUT_OF_MEMORY",
    FailureClass.CANCELLED: "CANCELLED",
    FailureClass.NODE_FAILURE: "NODE_FAIL",
}


def _submitit_state(info: JobInfo) -> str:
    if info.state == JobState.FAILED:
        return _SUBMITIT_FAILURE.get(info.failure or FailureClass.FAILED, "FAILED")
    return _SUBMITIT_STATE[info.state]


class PbsInfoWatcher(core.InfoWatcher):
    """One batched ``qstat -x -t -f -F json`` per update for every registered, unfinished job
    (one call per operand once this qstat has been seen dropping operands)."""

    one_at_a_time = False

    def _make_command(self) -> list[str] | None:
        operands = qstat_operands(sorted(self._registered - self._finished))
        if not operands:
            return None
        return ["qstat", *QSTAT_QUERY, *operands]

    def update(self) -> None:
        command = self._make_command()
        if command is None:
            return
        self._num_calls += 1
        operands = command[len(QSTAT_QUERY) + 1:]
        got = qstat_jobs(operands, one_at_a_time=self.one_at_a_time)
        self.one_at_a_time = self.one_at_a_time or bool(got.dropped)
        self._info_dict.update(self._infos(got))
        self._last_status_check = core._time.time()
        for job_id in self._registered - self._finished:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)

    @staticmethod
    def _infos(got: QstatResult) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for jid, attrs in got.jobs.items():
            info = job_info(jid, attrs)
            out[jid] = {"State": _submitit_state(info), "NodeList": info.node_list or "",
                        "ExitStatus": str(attrs.get("Exit_status", "")), "JobState": str(attrs.get("job_state", ""))}
        for jid in got.unknown:
            out.setdefault(jid, {"State": "UNKNOWN"})
        return out

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        """``qstat -f -F json`` text -> {job id: {"State": ..., "NodeList": ...}}."""
        try:
            jobs = parse_qstat_json(string)
        except ValueError:
            jobs = salvage_qstat_json(string.decode() if isinstance(string, bytes) else string)
        return self._infos(QstatResult(jobs, set(), {}, 1))

    def get_state(self, job_id: str, mode: str = "standard") -> str:
        info = self.get_info(job_id, mode=mode)
        return info.get("State") or "UNKNOWN"


class PbsJob(core.Job[core.R]):
    _cancel_command = "qdel"
    watcher = PbsInfoWatcher(delay_s=600)


class PbsJobEnvironment(job_environment.JobEnvironment):
    """What a submitit job sees on a PBS node (``SUBMITIT_EXECUTOR=pbs``)."""

    _env = {
        "job_id": "PBS_JOBID",
        "num_tasks": "PMI_SIZE",
        "num_nodes": "ORCH_PBS_NUM_NODES",
        "node": "ORCH_PBS_NODE",
        "global_rank": "PMI_RANK",
        "local_rank": "PMI_LOCAL_RANK",
        "array_job_id": "PBS_ARRAY_ID",
        "array_task_id": "PBS_ARRAY_INDEX",
    }

    @property
    def job_id(self) -> str:
        # PBS_JOBID is already the subjob's full id (9[2].server): the paths use it as is.
        return os.environ[self._env["job_id"]]

    @property
    def hostnames(self) -> list[str]:
        nodefile = os.environ.get("PBS_NODEFILE")
        hosts: list[str] = []
        if nodefile and Path(nodefile).is_file():
            for line in Path(nodefile).read_text().splitlines():
                if line.strip() and line.strip() not in hosts:
                    hosts.append(line.strip())
        return hosts or [self.hostname]

    @property
    def num_nodes(self) -> int:
        return len(self.hostnames)

    @property
    def node(self) -> int:
        hosts = self.hostnames
        return hosts.index(self.hostname) if self.hostname in hosts else 0

    def _requeue(self, countdown: int) -> None:
        raise utils.UncompletedJobError(
            "PBS jobs are not requeued in place (qrerun needs operator rights): resubmit instead")


class PbsExecutor(core.PicklingExecutor):
    """submitit executor for PBS Pro (plugin name ``pbs``).

    Parameters (``update_parameters``): ``job_name``, ``timeout_min``, ``nodes``, ``ncpus``,
    ``ngpus``, ``mpiprocs``, ``mem_gb``, ``select`` (extra chunk resources, e.g.
    ``system=polaris``), ``queue``, ``account``, ``place``, ``filesystems``,
    ``directives`` (more ``#PBS`` lines), ``setup`` (shell lines before the command),
    ``qsub_args`` (extra qsub options).
    """

    job_class = PbsJob

    def __init__(self, folder: str | Path, max_num_timeout: int = 0, max_pickle_size_gb: float = 1.0,
                 python: str | None = None) -> None:
        super().__init__(folder, max_num_timeout=max_num_timeout, max_pickle_size_gb=max_pickle_size_gb)
        self.python = shlex.quote(sys.executable) if python is None else python
        self.parameters.setdefault("timeout_min", 5)
        self._script_text: str | None = None  # orch: an already rendered script
        self._qsub_args: list[str] = []
        # orch's executor sets it from the profile's executor.commands_dir (pbs_command).
        self.commands_dir: str | None = None
        self._map_count: int | None = None

    @classmethod
    def _equivalence_dict(cls) -> core.EquivalenceDict:
        return {"name": "job_name", "timeout_min": "timeout_min", "mem_gb": "mem_gb", "nodes": "nodes",
                "cpus_per_task": "ncpus", "gpus_per_node": "ngpus", "tasks_per_node": "mpiprocs"}

    @classmethod
    def _valid_parameters(cls) -> set[str]:
        return {"job_name", "timeout_min", "nodes", "ncpus", "ngpus", "mpiprocs", "mem_gb", "select", "queue",
                "account", "place", "filesystems", "directives", "setup", "qsub_args"}

    def _internal_update_parameters(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - self._valid_parameters())
        if unknown:
            raise ValueError(f"Unavailable parameter(s): {unknown}; valid: {sorted(self._valid_parameters())}")
        super()._internal_update_parameters(**kwargs)

    @classmethod
    def affinity(cls) -> int:
        return -1 if shutil.which("qsub") is None else 2

    # -- the scripts -------------------------------------------------------------------

    def _directives(self) -> list[str]:
        p = self.parameters
        chunk = [str(p.get("nodes", 1))]
        for key in ("ncpus", "ngpus", "mpiprocs"):
            if p.get(key):
                chunk.append(f"{key}={int(p[key])}")
        if p.get("mem_gb"):
            chunk.append(f"mem={int(p['mem_gb'])}gb")
        if p.get("select"):
            chunk.append(str(p["select"]))
        minutes = float(p.get("timeout_min", 5))
        seconds = max(1, int(round(minutes * 60)))
        out = [f"-N {p.get('job_name', 'submitit')}", "-l select=" + ":".join(chunk),
               f"-l walltime={seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"]
        for key, flag in (("place", "-l place="), ("filesystems", "-l filesystems="), ("queue", "-q "),
                          ("account", "-A ")):
            if p.get(key):
                out.append(f"{flag}{p[key]}")
        out += [str(d) for d in p.get("directives", [])]
        return out

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        if self._script_text is not None:
            return self._script_text
        paths = utils.JobPaths(self.folder)
        stdout = str(paths.stdout).replace("%j", "${PBS_JOBID}").replace("%t", "0")
        stderr = str(paths.stderr).replace("%j", "${PBS_JOBID}").replace("%t", "0")
        lines = ["#!/bin/bash", *(f"#PBS {d}" for d in self._directives()), "",
                 "# PBS spools -o/-e until the end and does not expand %j: write the logs directly.",
                 f'exec >>"{stdout}" 2>>"{stderr}"', "export SUBMITIT_EXECUTOR=pbs"]
        lines += [str(s) for s in self.parameters.get("setup", [])]
        lines += [command, ""]
        return "\n".join(lines)

    def _pbs_logs(self, uid: str) -> tuple[str, str]:
        logs = self.folder / "pbs-logs"
        logs.mkdir(parents=True, exist_ok=True)
        suffix = ".^array_index^" if self._map_count else ""
        return str(logs / f"{uid}{suffix}.out"), str(logs / f"{uid}{suffix}.err")

    def _make_submission_command(self, submission_file_path: Path) -> list[str]:
        prefix = ["timeout", f"{qsub_timeout_s():g}"] if shutil.which("timeout") else []
        if self._script_text is not None:  # orch's rendered script: the caller gave -N/-o/-e
            args = [*prefix, pbs_command("qsub", self.commands_dir), *self._qsub_args]
        else:
            uid = submission_file_path.stem.lstrip(".").replace("submission_file_", "")
            out, err = self._pbs_logs(uid)
            args = [*prefix, pbs_command("qsub", self.commands_dir),
                    *[str(a) for a in self.parameters.get("qsub_args", [])], "-o", out, "-e", err]
        if self._map_count:
            args += ["-J", f"0-{self._map_count - 1}"]
        return [*args, str(submission_file_path)]

    @staticmethod
    def _get_job_id_from_submission_command(string: bytes | str) -> str:
        return parse_qsub_output(string)

    def _num_tasks(self) -> int:
        return 1

    @property
    def _submitit_command_str(self) -> str:
        return " ".join([self.python, "-u -m submitit.core._submit", shlex.quote(str(self.folder))])

    def _internal_process_submissions(self, delayed_submissions: list[utils.DelayedSubmission]
                                      ) -> list[core.Job[Any]]:
        if len(delayed_submissions) == 1:
            return super()._internal_process_submissions(delayed_submissions)
        # An array (-J 0-(n-1), n >= 2): pickles first, then one qsub; subjob i runs pickle i.
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        pickle_paths = []
        for d in delayed_submissions:
            pickle_path = folder / f"{uuid.uuid4().hex}.pkl"
            # submitit annotates minutes as int; it only multiplies them by 60, and a test's
            # timeout is a fraction of a minute.
            d.set_timeout(float(self.parameters.get("timeout_min", 5)), self.max_num_timeout)  # type: ignore[arg-type]
            d.dump(pickle_path)
            pickle_paths.append(pickle_path)
        self._throttle()
        self._map_count = len(delayed_submissions)
        try:
            first = self._submit_command(self._submitit_command_str)
        finally:
            self._map_count = None
        parent = parse_job_id(first.job_id)
        jobs: list[core.Job[Any]] = [PbsJob(folder=self.folder, job_id=str(parent.subjob(i)))
                                     for i in range(len(delayed_submissions))]
        for job, pickle_path in zip(jobs, pickle_paths):
            job.paths.move_temporary_file(pickle_path, "submitted_pickle")
        return jobs

    # -- orch's entry: a rendered script -------------------------------------------------

    def submit_script(self, text: str, qsub_args: Sequence[str], array_size: int | None = None) -> str:
        """qsub this script text (through submitit's _submit_command); return the job id qsub printed."""
        utils.JobPaths.get_first_id_independent_folder(self.folder).mkdir(parents=True, exist_ok=True)
        self._script_text = text
        self._qsub_args = list(qsub_args)
        self._map_count = array_size if array_size and array_size >= 2 else None
        try:
            job = self._submit_command("")
        finally:
            self._script_text, self._qsub_args, self._map_count = None, [], None
        return str(job.job_id)


