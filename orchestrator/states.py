"""The states a run and an attempt go through, and the classes a failed attempt is put in.

These are the one statement of each list. The values are the strings stored in the database
(``runs.status``, ``attempts.state``, ``attempts.failure_class``) and printed by every command;
a ``StrEnum`` member equals its value, so a row read back as text compares equal to its member,
and ``json``, ``str()`` and f-strings write the plain value. SQL text (``db/views``,
``db/queries``) spells the same values as strings.

A run's life: ``planned`` (or ``skipped``) -> ``submitting`` -> ``submitted`` -> ``running`` ->
``finished`` | ``failed`` | ``cancelled``, through ``retry`` (and back to ``submitting``) while
the sweep's retry policy names the failure and attempts remain. An attempt's:
``submitting`` -> ``pending`` -> ``running`` -> ``completed`` | ``failed``.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    """``runs.status``: where one run of a sweep stands."""

    PLANNED = "planned"  # recorded with its script, waiting to be submitted
    SKIPPED = "skipped"  # its site cannot run it (``skip_reason`` says why); never submitted
    SUBMITTING = "submitting"  # claimed by a submit: its attempt's intent is written, no job id yet
    SUBMITTED = "submitted"  # the scheduler has its job (job id recorded); not started yet
    RUNNING = "running"  # its job has started
    RETRY = "retry"  # its attempt failed in a class the sweep retries, attempts remain: submitted again
    FINISHED = "finished"  # its last attempt completed and its metrics were collected
    FAILED = "failed"  # its last attempt failed and is not retried
    CANCELLED = "cancelled"  # cancelled (``orch cancel``, or its job was cancelled) and not retried


class AttemptState(StrEnum):
    """``attempts.state``: where one submission of a run stands."""

    SUBMITTING = "submitting"  # the intent, written before the scheduler is called (no job id yet)
    PENDING = "pending"  # the scheduler has the job (job id recorded); it waits in the queue
    RUNNING = "running"  # the job has started
    COMPLETED = "completed"  # the script exited 0 and its metrics file was collected
    FAILED = "failed"  # ended any other way; ``failure_class`` says how


class FailureClass(StrEnum):
    """``attempts.failure_class``: why an attempt failed; a sweep's ``retry.failures`` names these."""

    TIMEOUT = "timeout"  # the walltime was reached
    OUT_OF_MEMORY = "out_of_memory"  # killed for using more memory than it had
    NODE_FAILURE = "node_failure"  # a node it ran on failed
    PREEMPTED = "preempted"  # the scheduler stopped it for other work
    CANCELLED = "cancelled"  # cancelled (orch cancel, scancel, qdel)
    FAILED = "failed"  # the script exited non-zero (exit code recorded)
    LAUNCH_ERROR = "launch_error"  # the scheduler or launcher could not start it
    MISSING_METRICS = "missing_metrics"  # exited 0 but wrote no metrics file
    BAD_METRICS = "bad_metrics"  # wrote a metrics file that does not validate
    LOST = "lost"  # the scheduler has no trace of it
    # A serving run (workloads/llm_serving.py) names these itself in serving_failure.json:
    SERVER_UNHEALTHY = "server_unhealthy"  # the inference server never answered its health check
    SERVER_DIED = "server_died"  # the inference server went away under load
    PORT_IN_USE = "port_in_use"  # the inference server's port was already taken


class ProbeState(StrEnum):
    """``site_probes.state``: where one ``orch sites probe`` job stands (its verdict: ``passed``)."""

    SUBMITTING = "submitting"  # the row and the run directory are written, the scheduler not called yet
    SUBMITTED = "submitted"  # the scheduler has the job (job id recorded): `orch sites probe --collect` follows it
    FINISHED = "finished"  # judged: ``passed`` and each check's outcome recorded
