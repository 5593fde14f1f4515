"""The schedulers a site profile may name (``scheduler:``) and each one's executor options
(the profile's ``executor:`` mapping), typed.

:data:`SCHEDULERS` is the one list of scheduler names: a profile is checked against it when it
loads, and :data:`orchestrator.run.executors.base.EXECUTORS` registers one executor under each
of these names (a test asserts the two sets are equal). Each options model forbids keys it does
not declare, so a misspelt option is an error at profile load that lists the valid ones; the
executor reads its options as this model, never as a dict.

The executors live in the run stage (:mod:`orchestrator.run.executors`), which the sites stage
may not import: the option models are here, where both can see them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from orchestrator.registry import Registry
from orchestrator.sites.options import Options


class ExecutorOptions(Options):
    """Base of the executor option models: no key it does not declare."""


# Every scheduler by name -> its executor options model.
SCHEDULERS: Registry[type[ExecutorOptions]] = Registry("scheduler")


def _text(value: Any) -> Any:
    """A number given where a command-line word is expected becomes its text (as qsub gets it)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


class BatchOptions(ExecutorOptions):
    """What every batch scheduler's executor takes (``BatchExecutor``: arrays and a queue limit)."""

    max_array_size: int | None = Field(
        None, ge=0,
        description="Runs of one shape go in job arrays of at most this many tasks; longer groups are split "
                    "into several arrays (unset or 0: 1000).")
    max_queued_jobs: int | None = Field(
        None, ge=0,
        description="The scheduler's limit on this user's queued and running jobs (array tasks count one each): "
                    "`submit` asks the scheduler once for the user's current count and submits only as many "
                    "runs as leave room; the others stay planned for a later `orch submit` (unset: no limit).")


@SCHEDULERS.register("slurm")
class SlurmOptions(BatchOptions):
    """Executor options of a Slurm site (``orchestrator/run/executors/slurm.py``)."""

    array_parallelism: int | None = Field(
        None, ge=0,
        description="At most this many tasks of one job array run at once (`--array=0-N%K`; unset or 0: no limit).")
    find_window_days: int = Field(
        30, ge=1,
        description="How far back (days) repairing an interrupted submit looks for jobs by name in `sacct`.")
    squeue_fallback: bool = Field(
        True,
        description="Slurm's accounting (`sacct`) lags its controller by a few seconds after a submit: when sacct "
                    "does not know a job yet, ask the controller with one `squeue` call about those jobs (pending "
                    "or running, with the reason and nodes). false: trust sacct alone; such a job stays `unknown` "
                    "until sacct knows it.")


@SCHEDULERS.register("pbs")
class PbsOptions(BatchOptions):
    """Executor options of a PBS Pro site (``orchestrator/run/executors/pbs/executor.py``)."""

    qsub_args: list[Annotated[str, BeforeValidator(_text)]] = Field(
        default_factory=list,
        description='Extra `qsub` options, each one word, put before orch\'s own (e.g. ["-W", "group_list=x"]).')
    qstat_one_operand: bool = Field(
        False,
        description="Ask qstat about one job per call from the start (for a qstat that drops operands of a "
                    "batched query; orch also switches on its own when it sees one do so).")
    commands_dir: str | None = Field(
        None,
        description="Directory holding the qsub, qstat and qdel orch runs, by absolute path (a rehearsal's PBS "
                    "emulator: a PBS install's profile script puts its own qsub first on every login shell's PATH); "
                    "unset: the first of each on PATH.")


@SCHEDULERS.register("local")
class LocalOptions(ExecutorOptions):
    """Executor options of the ``local`` scheduler: runs on this machine (``orchestrator/run/executors/local.py``)."""

    cores: int | None = Field(
        None,
        description="How many cores local runs may hold at once, all runs together (a run of N processes holds N); "
                    "$ORCH_LOCAL_CORES overrides it (unset: the cores orch may use).")

    @field_validator("cores", mode="before")
    @classmethod
    def _whole_cores(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"expected a whole number of cores >= 1, got {value!r}")
        return value


@SCHEDULERS.register("appliance")
class ApplianceOptions(LocalOptions):
    """Executor options of an ``appliance`` system (no batch scheduler for the user: Cerebras CS-2, a Gaudi
    node): the script runs on the machine orch runs on, the system's login or user node, as a local job does
    (``orchestrator/run/executors/appliance.py``); the vendor's tool hands the work to the system."""
