"""What every executor (one per scheduler) offers the rest of orch.

An executor owns one scheduler's commands: submitting rendered scripts (grouped
into arrays where the scheduler has them), asking about many jobs in one call,
cancelling, and finding jobs by name to repair an interrupted submit. It knows
nothing of the database; :mod:`orchestrator.submit` and :mod:`orchestrator.follow`
drive it.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


class JobState(str, enum.Enum):
    """Scheduler-neutral state of one job (one attempt of one run)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"  # the script exited 0
    FAILED = "failed"  # ended any other way; see FailureClass
    UNKNOWN = "unknown"  # the scheduler could not say (yet): never treated as an end


class FailureClass(str, enum.Enum):
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    NODE_FAILURE = "node_failure"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"
    FAILED = "failed"  # the script exited non-zero (exit code recorded)
    LAUNCH_ERROR = "launch_error"  # the scheduler or launcher could not start it
    MISSING_METRICS = "missing_metrics"  # exited 0 but wrote no metrics file
    BAD_METRICS = "bad_metrics"  # wrote a metrics file that does not validate
    LOST = "lost"  # the scheduler has no trace of it


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


class Executor(ABC):
    """Base of the per-scheduler executors; subclasses register by ``scheduler`` name."""

    scheduler: ClassVar[str]
    registry: ClassVar[dict[str, type["Executor"]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "scheduler", None):
            Executor.registry[cls.scheduler] = cls

    def __init__(self, folder: Path, options: dict[str, Any] | None = None) -> None:
        # folder: where scheduler-side bookkeeping (submitit files, logs) lives.
        self.folder = Path(folder)
        self.options = dict(options or {})
        self.calls: dict[str, int] = {}  # scheduler command -> times called (benchmarks read it)
        # After submit(), each request that got None (by job name) is in exactly one of these:
        self.submit_errors: dict[str, str] = {}  # the scheduler refused it: a launch error
        self.deferred: dict[str, str] = {}  # certainly not submitted (e.g. queue limit): try later
        self.uncertain: dict[str, str] = {}  # may have reached the scheduler: find_by_name decides

    def _count(self, command: str) -> None:
        self.calls[command] = self.calls.get(command, 0) + 1

    @abstractmethod
    def submit(self, requests: list[JobRequest]) -> list[str | None]:
        """Submit the requests; their job ids in the same order, ``None`` for one not submitted
        (its job name is then a key of ``submit_errors``, ``deferred`` or ``uncertain``)."""

    @abstractmethod
    def query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """State of every job in one batched scheduler call where possible."""

    @abstractmethod
    def cancel(self, job_ids: list[str]) -> None:
        """Ask the scheduler to stop these jobs."""

    def find_by_name(self, job_names: list[str]) -> dict[str, str]:
        """Job ids of jobs submitted under these names (repairs an interrupted submit)."""
        return {}


# Built-in executors, imported on first use (submitit and friends cost start-up time that
# commands such as `orch sql` should not pay). Executors defined elsewhere register on import.
BUILTIN_MODULES = {
    "local": "orchestrator.executors.local",
    "slurm": "orchestrator.executors.slurm",
    "pbs": "orchestrator.executors.pbs",
}


def executor_for(scheduler: str, folder: Path, options: dict[str, Any] | None = None) -> Executor:
    if scheduler not in Executor.registry and scheduler in BUILTIN_MODULES:
        import importlib

        importlib.import_module(BUILTIN_MODULES[scheduler])
    try:
        cls = Executor.registry[scheduler]
    except KeyError:
        known = ", ".join(sorted(Executor.registry))
        raise ValueError(f"no executor for scheduler {scheduler!r} (known: {known})") from None
    return cls(folder, options)
