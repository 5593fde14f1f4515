"""What every executor (one per scheduler) offers the rest of orch.

An executor owns one scheduler's commands: submitting rendered scripts (grouped
into arrays where the scheduler has them), asking about many jobs in one call,
cancelling, and finding jobs by name to repair an interrupted submit. It knows
nothing of the database; :mod:`orchestrator.run.submit` and :mod:`orchestrator.run.follow`
drive it.
"""

from __future__ import annotations

import enum
import hashlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

from orchestrator.registry import Registry
from orchestrator.states import FailureClass  # re-exported: executors classify failures

if TYPE_CHECKING:  # pydantic is imported by the executors' own modules, not by this one: a local
    # job's process (orchestrator.run.executors.local_job) imports this package and needs none of it
    from orchestrator.sites.schedulers import BatchOptions, ExecutorOptions


class JobState(str, enum.Enum):
    """Scheduler-neutral state of one job (one attempt of one run)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"  # the script exited 0
    FAILED = "failed"  # ended any other way; see FailureClass
    UNKNOWN = "unknown"  # the scheduler could not say (yet): never treated as an end


@dataclass(frozen=True)
class JobRequest:
    """One attempt of one run, ready to hand to a scheduler."""

    run_id: str
    attempt: int
    script_path: Path
    run_dir: Path
    job_name: str
    walltime_s: int
    nodes: int
    tasks_per_node: int
    queue: str | None = None
    account: str | None = None
    # Requests with the same shape key may share one job array.
    shape_key: str = ""
    # The sweep's `share: true`: the run may share its node (local: the machine) with other runs.
    share: bool = False


@dataclass
class JobInfo:
    job_id: str
    state: JobState
    failure: FailureClass | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    node_list: str | None = None
    max_rss_mb: float | None = None
    reason: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.state in (JobState.COMPLETED, JobState.FAILED)


@dataclass(frozen=True)
class SubmitResult:
    """What one :meth:`Executor.submit` did with its requests. Each request is either submitted
    (its job id) or, by its job name, in exactly one of ``refused``, ``deferred`` or ``uncertain``
    with the reason."""

    job_ids: tuple[str | None, ...]  # in the requests' order; None: not submitted (see below)
    refused: Mapping[str, str] = field(default_factory=dict)  # the scheduler refused it: a launch error
    deferred: Mapping[str, str] = field(default_factory=dict)  # certainly not submitted (queue limit): later
    uncertain: Mapping[str, str] = field(default_factory=dict)  # may have reached it: find_by_name decides


class Executor(ABC):
    """Base of the per-scheduler executors; each registers with ``@EXECUTORS.register("<scheduler>")``
    and reads its options (the profile's ``executor:``) as ``options_model``, that scheduler's model
    in :data:`orchestrator.sites.schedulers.SCHEDULERS`."""

    scheduler: ClassVar[str] = ""  # set by EXECUTORS.register
    options_model: ClassVar[type[ExecutorOptions]]  # the scheduler's model (set by each executor)
    options: ExecutorOptions

    def __init__(self, folder: Path, options: Mapping[str, Any] | ExecutorOptions | None = None) -> None:
        from orchestrator.sites.options import typed_options

        # folder: where scheduler-side bookkeeping (submitit files, logs) lives.
        self.folder = Path(folder)
        self.options = typed_options(self.options_model, options, f"scheduler {self.scheduler or '?'}")
        self.calls: dict[str, int] = {}  # scheduler command -> times called (benchmarks read it)
        # While a submit() runs: the requests it did not submit, by job name, with the reason (it
        # returns them in its SubmitResult: refused, deferred, uncertain).
        self._refused: dict[str, str] = {}
        self._deferred: dict[str, str] = {}
        self._uncertain: dict[str, str] = {}

    def _count(self, command: str) -> None:
        self.calls[command] = self.calls.get(command, 0) + 1

    @abstractmethod
    def submit(self, requests: list[JobRequest]) -> SubmitResult:
        """Submit the requests; their job ids in the same order, ``None`` for one not submitted
        (its job name is then a key of the result's ``refused``, ``deferred`` or ``uncertain``)."""

    @abstractmethod
    def query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """State of every job in one batched scheduler call where possible."""

    @abstractmethod
    def cancel(self, job_ids: list[str]) -> None:
        """Ask the scheduler to stop these jobs."""

    def find_by_name(self, job_names: list[str]) -> dict[str, str]:
        """Job ids of jobs submitted under these names (repairs an interrupted submit). Raises
        SchedulerError when the scheduler could not be asked: a missing name means "not known"."""
        return {}

    def submit_activity(self) -> datetime | None:
        """When a submit command last started for this site (None: not tracked)."""
        return None


# Every executor by scheduler name, one per name of orchestrator.sites.schedulers.SCHEDULERS (a test
# asserts the two sets are equal). The built-in executors' modules are imported before the first
# lookup, not with this module (submitit and friends cost start-up time that commands such as
# `orch sql` should not pay).
EXECUTORS: Registry[type[Executor]] = Registry("scheduler", name_attr="scheduler", modules=(
    "orchestrator.run.executors.local",
    "orchestrator.run.executors.appliance",
    "orchestrator.run.executors.slurm",
    "orchestrator.run.executors.pbs",
))


class SchedulerError(RuntimeError):
    """A scheduler command failed (the message says which and why)."""


# One submit command (sbatch, qsub) may run this long before orch gives up on it. A command
# given up on may still have reached the server and succeed late, so the grace an intent
# without a job id gets before it is handed back to ``planned`` (orchestrator.run.follow) is
# derived from it, never set apart from it: grace = timeout + margin.
SUBMIT_TIMEOUT_S = 180.0
SUBMIT_GRACE_MARGIN_S = 60.0


def log_tail(path: str | os.PathLike[str], limit: int = 3) -> str | None:
    """The last non-blank lines (at most ``limit``) of a scheduler-side log, joined with "; ";
    None when it is empty or cannot be read here. Used for the wrapper's own error output (a PBS
    job's -e file, a Slurm array task's wrapper log): it holds only what failed around the
    program (an unwritable run log), never the program's output, so it names the cause."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4096))  # the end is what says why
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return "; ".join(lines[-limit:]) or None


def submit_window() -> tuple[float, float]:
    """(timeout of one submit command, submit grace) in seconds; the grace always exceeds the
    timeout by a margin. ``ORCH_SUBMIT_GRACE_S`` (tests, impatient users) sets the grace and
    shortens the timeout with it, keeping the margin (at most half the grace)."""
    override = os.environ.get("ORCH_SUBMIT_GRACE_S")
    try:
        grace = max(2.0, float(override)) if override else None
    except ValueError:
        grace = None
    if grace is not None:
        return grace - min(SUBMIT_GRACE_MARGIN_S, grace / 2), grace
    return SUBMIT_TIMEOUT_S, SUBMIT_TIMEOUT_S + SUBMIT_GRACE_MARGIN_S


class BatchExecutor(Executor):
    """An executor for a batch scheduler with job arrays and a per-user queue limit.

    ``submit`` admits as many requests as ``options.max_queued_jobs`` leaves room for
    (the rest are ``deferred``), groups the admitted ones by ``shape_key`` (in the caller's
    order), splits groups at ``options.max_array_size`` and hands each chunk to
    ``_submit_group``: one plain job for a chunk of one, one array otherwise.
    """

    options: BatchOptions  # options_model: a BatchOptions of orchestrator.sites.schedulers
    default_max_array_size: ClassVar[int] = 1000
    # In the executor folder: touched as each submit command starts (see submit_activity).
    submit_marker: ClassVar[str] = "submit-started"

    def _mark_submit_started(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / self.submit_marker).touch()

    def submit_activity(self) -> datetime | None:
        """When a submit command last started from this folder, by any orch process. One ``orch
        submit`` writes the intents of a whole site first and then runs one submit command per
        array: an intent can wait for its command far longer than one command's timeout.
        ``orchestrator.run.follow`` measures the submit grace from this time as well as from the
        intent's, so a concurrent ``orch status`` never hands back a run still queued to go."""
        try:
            return datetime.fromtimestamp((self.folder / self.submit_marker).stat().st_mtime, timezone.utc)
        except OSError:
            return None

    # -- array manifests: which job names an array holds, on disk before its submit command --

    def _arrays_dir(self) -> Path:
        return self.folder / "arrays"

    def _write_array_manifest(self, names: Sequence[str]) -> str:
        """Write the array's job names (task i runs names[i]) and return the array's job name,
        ``orch-array-<digest of the names>``. The names go to disk before the submit command:
        after a crash, :meth:`_array_members` maps them to the array's tasks."""
        digest = hashlib.sha1("\n".join(names).encode()).hexdigest()[:16]
        manifest = self._arrays_dir() / f"{digest}.names"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        tmp = manifest.with_suffix(".tmp")
        tmp.write_text("\n".join(names) + "\n")
        os.replace(tmp, manifest)
        return f"orch-array-{digest}"

    def _array_members(self, wanted: set[str]) -> dict[str, list[tuple[str, int]]]:
        """job name -> every (array job name, task index) whose manifest lists it. A name can be in
        two manifests (an array that never reached the scheduler, then one that did): the caller
        asks about every array and takes the newest job among those the scheduler knows."""
        found: dict[str, list[tuple[str, int]]] = {}
        adir = self._arrays_dir()
        if not adir.is_dir():
            return found
        for manifest in sorted(adir.glob("*.names")):
            try:
                names = manifest.read_text().splitlines()
            except OSError:
                continue
            for i, name in enumerate(names):
                if name in wanted:
                    found.setdefault(name, []).append((f"orch-array-{manifest.stem}", i))
        return found

    @abstractmethod
    def queued_count(self) -> int:
        """Jobs of this user the scheduler holds now (array tasks one each); SchedulerError if unknown."""

    @abstractmethod
    def _submit_group(self, requests: list[JobRequest]) -> list[str | None]:
        """Submit one chunk (a plain job when it holds one request, else an array)."""

    def _read_scripts(self, requests: list[JobRequest]) -> list[str] | None:
        """The rendered scripts of a chunk (run directories made); None, with every request
        of the chunk refused, when one cannot be read."""
        texts: list[str] = []
        for req in requests:
            try:
                texts.append(Path(req.script_path).read_text())
            except OSError as exc:
                for other in requests:
                    self._refused[other.job_name] = f"cannot read {req.script_path}: {exc}"
                return None
            Path(req.run_dir).mkdir(parents=True, exist_ok=True)
        return texts

    def _admitted(self, requests: list[JobRequest]) -> int:
        max_queued = self.options.max_queued_jobs
        if max_queued is None:
            return len(requests)
        try:
            queued = self.queued_count()
        except SchedulerError as exc:
            for req in requests:
                self._deferred[req.job_name] = str(exc)
            return 0
        limit = max(0, min(len(requests), int(max_queued) - queued))
        for req in requests[limit:]:
            self._deferred[req.job_name] = f"max_queued_jobs={max_queued} reached ({queued} queued now)"
        return limit

    def _chunks(self, requests: list[JobRequest]) -> list[list[int]]:
        order: list[list[int]] = []
        groups: dict[str, list[int]] = {}
        for index, req in enumerate(requests):
            if not req.shape_key:
                order.append([index])
            elif req.shape_key in groups:
                groups[req.shape_key].append(index)
            else:
                groups[req.shape_key] = [index]
                order.append(groups[req.shape_key])
        size = max(1, int(self.options.max_array_size or self.default_max_array_size))
        return [idxs[start:start + size] for idxs in order for start in range(0, len(idxs), size)]

    def submit(self, requests: list[JobRequest]) -> SubmitResult:
        """Ids in the caller's order; ``None`` for a request the result has as ``refused``,
        ``deferred`` or ``uncertain``. Never raises for those: the other chunks are still submitted."""
        self._refused, self._deferred, self._uncertain = {}, {}, {}
        ids: list[str | None] = [None] * len(requests)
        for chunk in self._chunks(requests[:self._admitted(requests)]):
            for index, job_id in zip(chunk, self._submit_group([requests[i] for i in chunk])):
                ids[index] = job_id
        return SubmitResult(tuple(ids), refused=self._refused, deferred=self._deferred, uncertain=self._uncertain)


def executor_for(scheduler: str, folder: Path,
                 options: Mapping[str, Any] | ExecutorOptions | None = None) -> Executor:
    """The executor registered for ``scheduler`` with these options (the profile's ``executor:``);
    an unknown scheduler (UnknownName) or option (UserError) is one line listing the valid ones."""
    return EXECUTORS.get(scheduler)(folder, options)
