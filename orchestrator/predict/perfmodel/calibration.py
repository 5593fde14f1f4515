"""Efficiency factors fitted to measured runs (`orch calibrate`), stored in the project's
``.orch/calibration.yaml`` and used by every later prediction on the same device.

The fit: factors of :class:`~orchestrator.predict.perfmodel.machine.Efficiency` (matmul,
memory, network fractions, the launch cost per op and the fixed cost per step) that minimise
the mean absolute relative error of predicted against measured step time (the figure `orch
calibrate` reports) over the runs of one device model (and site), plus a pull towards the
defaults (the priors: PRIOR_WEIGHT per unit of |log(factor / prior)|), by coordinate descent in
log space from the defaults (a few hundred model evaluations a run). Factors stay within
physical bounds (fractions in (0, 1], or up to 2 for the nominal CPU peak, which a core may beat).

Few free factors (issue 25): a fit of n runs frees at most n - 1 factors, in the order of
FACTORS (the ones that matter most first), so at least one run more than factors; a single run
is refused (:func:`free_factors` returns none). Beside the in-sample error, :func:`held_out_error`
reports the leave-one-out error (each run predicted by a fit on the others; above
MAX_FOLDS runs, MAX_FOLDS-fold cross-validation by run order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import yaml

from orchestrator.predict.perfmodel.machine import Efficiency, Machine
from orchestrator.safefile import replace_file
from orchestrator.yamlsource import load_yaml

FILE_NAME = "calibration.yaml"
# Bounds of each factor (the CPU's nominal peak may be beaten: its matmul fraction may pass 1).
BOUNDS = {"matmul": (0.01, 2.0), "memory": (0.01, 2.0), "network": (0.01, 1.0), "op_overhead_us": (0.0, 5000.0),
          "step_overhead_ms": (0.0, 60000.0)}
# The order in which factors are freed: the matmul fraction and the fixed cost per step decide
# most steps (issue 25: missing step overhead made small steps up to 12x too fast); the memory
# and network fractions matter only where the runs are memory- or network-bound.
FACTORS = ("matmul", "step_overhead_ms", "op_overhead_us", "memory", "network")
# Pull towards the prior per unit |log(factor / prior)| (overheads: log((v + 1) / (prior + 1))),
# against the mean relative error: a factor the runs barely constrain stays near its default.
PRIOR_WEIGHT = 0.005
MAX_FOLDS = 12


@dataclass(frozen=True)
class Sample:
    """A measured run: how to predict its step with given factors, and the measured step."""

    machine: Machine
    predict: Callable[[Machine], float]
    measured_s: float


def calibration_path(state_dir: Path | None = None) -> Path:
    from orchestrator import paths

    return (state_dir or paths.state_dir()) / FILE_NAME


def _load(path: Path) -> list[dict[str, object]]:
    """The file's entries, each checked: a hand-edited or damaged file is a ``file:line`` error,
    never a traceback in the middle of a plan (SourceError)."""
    if not path.is_file():
        return []
    doc = load_yaml(path)  # bounded, like every YAML file orch reads
    data = doc.data if doc.data is not None else {}
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(entries, (list, type(None))):
        raise doc.error((), "expected a mapping with a list 'entries' (the file orch calibrate writes)")
    for index, entry in enumerate(entries or []):
        if not isinstance(entry, dict):
            raise doc.error(("entries", index), "expected a mapping (one fit per device model)")
        for name, (low, high) in BOUNDS.items():
            value = entry.get(name)
            if value is None and name == "step_overhead_ms":
                continue  # absent from files written before issue 25
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or not low <= value <= high):
                raise doc.error(("entries", index, name), f"expected a number from {low:g} to {high:g}, got "
                                                          f"{value!r} (re-run orch calibrate, or delete the entry)")
    return list(entries or [])


def efficiency_for(machine: Machine, state_dir: Path | None = None) -> Efficiency | None:
    """The fitted factors for this machine: its site and device model, else the device model on
    any site, else None (the defaults apply)."""
    try:
        entries = _load(calibration_path(state_dir))
    except OSError:  # unreadable: the defaults apply, as with no file
        return None
    site = machine.name
    for match in (lambda e: e.get("site") == site and e.get("device_model") == machine.device_model,
                  lambda e: e.get("device_model") == machine.device_model):
        for entry in reversed(entries):
            if match(entry):
                step = entry.get("step_overhead_ms")  # absent from files written before issue 25
                return Efficiency(float(entry["matmul"]), float(entry["memory"]),  # type: ignore[arg-type]
                                  float(entry["network"]), float(entry["op_overhead_us"]),  # type: ignore[arg-type]
                                  f"fitted by orch calibrate on {entry.get('runs')} run(s) of {entry.get('site')} "
                                  f"({entry.get('fitted_at')})",
                                  Efficiency.step_overhead_ms if step is None else float(step))  # type: ignore[arg-type]
    return None


def mean_abs_error(samples: Sequence[Sample], efficiency: Efficiency | None = None) -> float:
    """Mean |predicted - measured| / measured of the samples' step times."""
    errors = []
    for s in samples:
        machine = s.machine if efficiency is None else s.machine.with_efficiency(efficiency)
        errors.append(abs(s.predict(machine) - s.measured_s) / s.measured_s)
    return sum(errors) / len(errors) if errors else float("nan")


def _loss(samples: Sequence[Sample], efficiency: Efficiency, prior: Efficiency | None = None) -> float:
    # The error reported (mean |predicted - measured| / measured), so a fit never reports a
    # worse in-sample error than its start (a log error could, with one slow outlier run).
    total = 0.0
    for s in samples:
        predicted = s.predict(s.machine.with_efficiency(efficiency))
        total += abs(predicted - s.measured_s) / s.measured_s
    penalty = 0.0
    if prior is not None:
        for name in FACTORS:
            value, base = getattr(efficiency, name), getattr(prior, name)
            shift = 1.0 if name.endswith(("_us", "_ms")) else 0.0  # overheads may be 0
            penalty += abs(math.log((value + shift) / (base + shift))) if base + shift > 0 else 0.0
    return total / len(samples) + PRIOR_WEIGHT * penalty


def free_factors(runs: int) -> tuple[str, ...]:
    """The factors a fit of ``runs`` runs may free: at most runs - 1 (none for one run)."""
    return FACTORS[:max(0, runs - 1)]


def fit(samples: Sequence[Sample], start: Efficiency) -> Efficiency:
    """The factors minimising the mean absolute relative error over ``samples`` plus the pull towards
    ``start`` (the priors), freeing :func:`free_factors` of them (coordinate descent)."""
    names = free_factors(len(samples))
    if not names:
        return start
    best = start
    best_loss = _loss(samples, best, start)
    step = 2.0
    while step > 1.01:
        improved = False
        for name in names:
            low, high = BOUNDS[name]
            for factor in (step, 1 / step):
                value = getattr(best, name)
                # The launch cost may start at 0: move it additively from there.
                new = value * factor if value > 0 else (1.0 if factor > 1 else 0.0)
                new = min(high, max(low, new))
                if new == value:
                    continue
                candidate = replace(best, **{name: new})  # type: ignore[arg-type]  # a float field, named
                loss = _loss(samples, candidate, start)
                if loss < best_loss - 1e-9:
                    best, best_loss, improved = candidate, loss, True
        if not improved:
            step = math.sqrt(step)
    return replace(best, source="fitted")


def held_out_error(samples: Sequence[Sample], start: Efficiency) -> float | None:
    """Mean |predicted - measured| / measured of each run predicted by a fit on the other runs
    (leave-one-out; above MAX_FOLDS runs, MAX_FOLDS folds of every MAX_FOLDS-th run). None for
    fewer than three runs (a fit of the rest would free no factor or be refused)."""
    if len(samples) < 3:
        return None
    folds = min(len(samples), MAX_FOLDS)
    errors: list[float] = []
    for k in range(folds):
        held = [s for i, s in enumerate(samples) if i % folds == k]
        rest = [s for i, s in enumerate(samples) if i % folds != k]
        factors = rounded(fit(rest, start))
        errors += [abs(s.predict(s.machine.with_efficiency(factors)) - s.measured_s) / s.measured_s for s in held]
    return sum(errors) / len(errors)


def rounded(efficiency: Efficiency) -> Efficiency:
    """The factors as calibration.yaml stores them, so what `orch calibrate` reports is what a
    later prediction reads back."""
    return replace(efficiency, matmul=round(efficiency.matmul, 6), memory=round(efficiency.memory, 6),
                   network=round(efficiency.network, 6), op_overhead_us=round(efficiency.op_overhead_us, 3),
                   step_overhead_ms=round(efficiency.step_overhead_ms, 4))


def store(efficiency: Efficiency, machine: Machine, *, runs: int, error_before: float, error_after: float,
          state_dir: Path | None = None, error_held_out: float | None = None) -> Path:
    """Add (or replace) the entry of this machine's site and device model in calibration.yaml."""
    path = calibration_path(state_dir)
    entries = [e for e in _load(path)
               if not (e.get("site") == machine.name and e.get("device_model") == machine.device_model)]
    efficiency = rounded(efficiency)
    entries.append({
        "site": machine.name, "device_type": machine.device_type, "device_model": machine.device_model,
        "matmul": efficiency.matmul, "memory": efficiency.memory,
        "network": efficiency.network, "op_overhead_us": efficiency.op_overhead_us,
        "step_overhead_ms": efficiency.step_overhead_ms,
        "runs": runs, "mean_step_error_before": round(error_before, 4), "mean_step_error_after": round(error_after, 4),
        "mean_step_error_held_out": None if error_held_out is None else round(error_held_out, 4),
        "fitted_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    # A fixed temporary name could be a planted symbolic link: replace_file makes its own.
    replace_file(path, ("# Efficiency factors fitted by `orch calibrate` (orchestrator/predict/perfmodel/"
                        "calibration.py).\n" + yaml.safe_dump({"entries": entries}, sort_keys=False)).encode())
    return path
