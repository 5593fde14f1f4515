"""The histories the regression finder reads: every completed attempt's figure with its run's
configuration, its epoch and what it ran with (provenance), straight from the tables."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select

from orchestrator.results.db.models import Attempt, Environment, Metrics, Run, ScriptText
from orchestrator.states import AttemptState

# The headline figure of a series when none is asked for: the first one its rows have. The rates
# from the median step come first: one step stalled by a neighbour moves a total-based rate, not
# them, and a regression is a change of the machine, not of one step.
HEADLINE = ("tokens_per_s_median", "tokens_per_s", "samples_per_s_median", "samples_per_s", "tflops_median",
            "tflops", "bandwidth_gbs")
# Figures where less is better; for every other one (throughputs) more is.
LOWER_IS_BETTER = frozenset({"step_time_s", "step_time_p50_s", "step_time_p90_s", "epoch_time_s", "timed_time_s",
                             "peak_mem_gb", "elapsed_s"})
FIGURES = frozenset(HEADLINE) | LOWER_IS_BETTER | {"tflops_per_device", "mfu", "tokens_per_s_median",
                                                   "samples_per_s_median", "tflops_median"}
# What makes two runs the same measurement: a series is one of these (the repeat index is not: the
# repeats of one epoch are summarised by their median).
SERIES_KEY = ("sweep", "experiment", "workload", "site", "system", "devices", "precision", "strategy", "batch_size",
              "seq_len", "params")
# Environment entries that say nothing about the software or node (they differ run to run).
_IGNORED_ENV = frozenset({"argv", "scheduler_env", "hostnames", "hostnames_by_rank", "git_dirty"})


@dataclass
class Observation:
    """One completed attempt: its figures, epoch and provenance."""

    run_id: str
    attempt_id: int
    epoch: int
    repeat: int
    finished_at: datetime | None
    key: tuple[Any, ...]
    figures: dict[str, float]
    provenance: dict[str, str] = field(default_factory=dict)
    script_hash: str | None = None


def _provenance(row: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    env = json.loads(row.env) if row.env else {}
    for name, value in sorted(env.items()) if isinstance(env, dict) else ():
        if name not in _IGNORED_ENV and value is not None and not isinstance(value, (dict, list)):
            out[name] = str(value)
    for name in ("node_list", "orch_version", "profile_hash", "code_revision"):
        value = getattr(row, name)
        if value is not None:
            out[name] = str(value)
    return out


def epochs(engine: Engine, sweep: str | None = None) -> int:
    """The most epochs any run (of ``sweep``) has: a series cannot be longer."""
    query = select(func.max(Run.epoch))
    if sweep:
        query = query.where(Run.sweep == sweep)
    with engine.connect() as connection:
        return int(connection.scalar(query) or 0)


def observations(engine: Engine, sweep: str | None = None) -> list[Observation]:
    """Every completed attempt with metrics (of ``sweep``, or of every sweep), oldest epoch first."""
    columns = [getattr(Metrics, name) for name in sorted(FIGURES - {"elapsed_s"})]
    query = (select(Attempt.id.label("attempt_id"), Attempt.epoch, Attempt.finished_at, Attempt.node_list,
                    Attempt.orch_version, Attempt.profile_hash, Attempt.script_hash, Attempt.elapsed_s,
                    Run.id.label("run_id"), Run.repeat, *[getattr(Run, k) for k in SERIES_KEY],
                    Metrics.code_revision, Environment.data.label("env"), *columns)
             .join(Run, Run.id == Attempt.run_id).join(Metrics, Metrics.attempt_id == Attempt.id)
             .outerjoin(Environment, Environment.id == Metrics.environment_id)
             .where(Attempt.state == AttemptState.COMPLETED).order_by(Attempt.epoch, Attempt.id))
    if sweep:
        query = query.where(Run.sweep == sweep)
    out = []
    with engine.connect() as connection:
        for row in connection.execute(query):
            figures = {name: float(getattr(row, name)) for name in FIGURES if getattr(row, name) is not None}
            out.append(Observation(run_id=row.run_id, attempt_id=row.attempt_id, epoch=row.epoch or 1,
                                   repeat=row.repeat, finished_at=row.finished_at,
                                   key=tuple(getattr(row, k) for k in SERIES_KEY), figures=figures,
                                   provenance=_provenance(row), script_hash=row.script_hash))
    return out


def scripts(engine: Engine, hashes: set[str]) -> dict[str, str]:
    """Script texts by sha256."""
    if not hashes:
        return {}
    with engine.connect() as connection:
        return dict(connection.execute(select(ScriptText.sha256, ScriptText.text)
                                       .where(ScriptText.sha256.in_(sorted(hashes)))).all())
