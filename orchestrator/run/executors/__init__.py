"""Executors, one per scheduler. The built-in ones are imported when first asked for
(see ``BUILTIN_MODULES`` in base.py); any other subclass registers itself on import."""

from orchestrator.run.executors.base import Executor, FailureClass, JobInfo, JobRequest, JobState, executor_for

__all__ = ["Executor", "FailureClass", "JobInfo", "JobRequest", "JobState", "executor_for"]
