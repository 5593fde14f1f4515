"""Executors, one per scheduler. Importing this package registers the built-in ones."""

from orchestrator.executors.base import Executor, FailureClass, JobInfo, JobRequest, JobState, executor_for
from orchestrator.executors import local  # noqa: F401  (registers "local")

__all__ = ["Executor", "FailureClass", "JobInfo", "JobRequest", "JobState", "executor_for"]
