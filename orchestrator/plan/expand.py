"""Stage 2: a validated sweep expanded into concrete runs, each with a stable id.

The id is a content hash of what the run *is* (sweep, experiment, workload, site,
axes, parameters, repeat index), so the same spec gets the same id in any process
and re-planning a sweep adds nothing twice.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from orchestrator.plan.sweep import Experiment, RetryPolicy, Sweep

ID_LENGTH = 16


@dataclass(frozen=True)
class RunSpec:
    sweep: str
    experiment: str
    workload: str
    site: str
    system: str | None
    devices: int
    precision: str
    strategy: str | None
    batch_size: int | None
    seq_len: int | None
    repeat: int
    params: tuple[tuple[str, Any], ...]  # workload parameters, sorted by name
    walltime_s: int = field(compare=False)
    max_attempts: int = field(default=1, compare=False)
    retry_on: tuple[str, ...] = field(default=(), compare=False)
    queue: str | None = field(default=None, compare=False)  # asked for by name, else the site picks
    check_memory: bool = field(default=True, compare=False)  # skip runs predicted not to fit
    share: bool = field(default=False, compare=False)  # may share its node with other jobs
    # warn | skip when the predicted run time exceeds the walltime (orchestrator/plan/sweep.py OVER_WALLTIME)
    over_walltime: str = field(default="warn", compare=False)
    # What the sweep changes in the site's profile for this run (setup, env, env_prepend, python_env:
    # orchestrator/plan/sweep.py SiteOverride), merged; None: nothing. Not in the id: the same
    # measurement in another environment. It is in the spec (spec.json, runs.spec), so the script it
    # renders can be traced to it, and re-planning renders the script again from it.
    site_overrides: dict[str, Any] | None = field(default=None, compare=False)

    def identity(self) -> dict[str, Any]:
        """What the id hashes: everything that changes what is measured."""
        return {
            "sweep": self.sweep,
            "experiment": self.experiment,
            "workload": self.workload,
            "site": self.site,
            "system": self.system,
            "devices": self.devices,
            "precision": self.precision,
            "strategy": self.strategy,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "repeat": self.repeat,
            "params": dict(self.params),
        }

    @functools.cached_property
    def id(self) -> str:
        # Computed once per spec (a plan asks for it several times per run); the fields are frozen.
        canonical = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:ID_LENGTH]

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def axes(self) -> dict[str, Any]:
        """Every axis value by name (first-class and workload parameters), for matching."""
        return {**self.identity(), **self.param_dict}


def _excluded(point: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    for rule in rules:
        if all(point.get(key) in (want if isinstance(want, list) else [want]) for key, want in rule.items()):
            return True
    return False


def _points(exp: Experiment) -> Iterator[dict[str, Any]]:
    """Every combination of grid values and zip-group rows, in file order."""
    axes: list[list[dict[str, Any]]] = []
    for group in exp.zip.values():
        columns = list(group.items())
        rows = len(columns[0][1]) if columns else 0
        axes.append([{name: values[i] for name, values in columns} for i in range(rows)])
    for name, value in exp.grid.items():
        if name == "repeats":
            continue
        values = value if isinstance(value, list) else [value]
        axes.append([{name: v} for v in values])
    for combo in itertools.product(*axes):
        point: dict[str, Any] = {}
        for part in combo:
            point.update(part)
        yield point


FIRST_CLASS = ("devices", "precision", "strategy", "batch_size", "seq_len")


def expand_experiment(sweep: Sweep, exp: Experiment) -> list[RunSpec]:
    retry: RetryPolicy = exp.retry or sweep.retry
    repeats = int(exp.grid.get("repeats", 1))
    # What is the same for every run of the experiment, worked out once (not per run).
    walltime_s, retry_on = exp.walltime_s, tuple(retry.failures)
    over_walltime = exp.over_walltime or sweep.over_walltime
    points = [(point, int(point.get("devices", 1)), str(point.get("precision", "fp32")),
               tuple(sorted((k, v) for k, v in point.items() if k not in FIRST_CLASS)))
              for point in _points(exp)]
    runs: list[RunSpec] = []
    for target in exp.sites:
        site, _, system = target.partition(":")
        site_overrides = sweep.site_overrides_for(exp, site, system or None)  # once per site of the experiment
        for point, devices, precision, params in points:
            if exp.exclude and _excluded({**point, "site": site, "system": system or None}, exp.exclude):
                continue
            for repeat in range(repeats):
                runs.append(
                    RunSpec(
                        sweep=sweep.name,
                        experiment=exp.name,
                        workload=exp.workload,
                        site=site,
                        system=system or None,
                        devices=devices,
                        precision=precision,
                        strategy=point.get("strategy"),
                        batch_size=point.get("batch_size"),
                        seq_len=point.get("seq_len"),
                        repeat=repeat,
                        params=params,
                        walltime_s=walltime_s,
                        max_attempts=retry.max_attempts,
                        retry_on=retry_on,
                        queue=exp.queue,
                        check_memory=exp.check_memory,
                        share=exp.share,
                        over_walltime=over_walltime,
                        site_overrides=site_overrides,
                    )
                )
    return runs


def expand(sweep: Sweep) -> list[RunSpec]:
    """All runs of the sweep, duplicates (same id) kept once, in file order."""
    seen: dict[str, RunSpec] = {}
    for exp in sweep.experiments:
        for run in expand_experiment(sweep, exp):
            seen.setdefault(run.id, run)
    return list(seen.values())
