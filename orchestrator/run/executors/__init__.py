"""Executors, one per scheduler name of :data:`orchestrator.sites.schedulers.SCHEDULERS`, each
registered with ``@EXECUTORS.register("<scheduler>")``. The built-in ones' modules are imported
before the first lookup (see ``EXECUTORS`` in base.py), not with this package."""

from orchestrator.run.executors.base import (
    EXECUTORS,
    Executor,
    FailureClass,
    JobInfo,
    JobRequest,
    JobState,
    executor_for,
)

__all__ = ["EXECUTORS", "Executor", "FailureClass", "JobInfo", "JobRequest", "JobState", "executor_for"]
