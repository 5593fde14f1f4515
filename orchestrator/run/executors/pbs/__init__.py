"""PBS Pro for orch (Polaris, the AI Testbed's Groq), in three parts:

* :mod:`.qstat`: PBS's outputs read (job ids, ``qsub``'s answer, ``qstat -f -F json``,
  ``Exit_status`` classes) and :func:`.qstat.qstat_jobs`, the batched query that checks
  every operand came back;
* :mod:`.plugin`: the submitit plugin (:class:`PbsExecutor`, :class:`PbsJobEnvironment`;
  the entry points in pyproject.toml name them through this package);
* :mod:`.executor`: orch's executor (:class:`OrchPbsExecutor`, ``scheduler = "pbs"``).

Importing this package registers orch's executor (``executor_for("pbs", ...)``).
"""

from orchestrator.run.executors.pbs.executor import OrchPbsExecutor, parse_directives, read_exit_marker, wrapper_text
from orchestrator.run.executors.pbs.plugin import PbsExecutor, PbsInfoWatcher, PbsJob, PbsJobEnvironment
from orchestrator.run.executors.pbs.qstat import (
                                              QSTAT_QUERY,
                                              RC_JOB_FINISHED,
                                              RC_UNKNOWN_JOB,
                                              PbsError,
                                              PbsJobId,
                                              QstatResult,
                                              classify_exit,
                                              exec_hosts,
                                              is_transient_qsub_error,
                                              job_info,
                                              normalize_job_id,
                                              parse_job_id,
                                              parse_mem_mb,
                                              parse_qstat_json,
                                              parse_qsub_output,
                                              qstat_jobs,
                                              qstat_operands,
                                              salvage_qstat_json,
)

__all__ = [
    "OrchPbsExecutor", "PbsError", "PbsExecutor", "PbsInfoWatcher", "PbsJob", "PbsJobEnvironment", "PbsJobId",
    "QSTAT_QUERY", "QstatResult", "RC_JOB_FINISHED", "RC_UNKNOWN_JOB", "classify_exit", "exec_hosts",
    "is_transient_qsub_error", "job_info", "normalize_job_id", "parse_directives", "parse_job_id", "parse_mem_mb",
    "parse_qstat_json", "parse_qsub_output", "qstat_jobs", "qstat_operands", "read_exit_marker",
    "salvage_qstat_json", "wrapper_text",
]
