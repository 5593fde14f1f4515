"""Efficiency factors fitted to measured runs (`orch calibrate`), stored in the project's
``.orch/calibration.yaml`` and used by every later prediction on the same device.

The fit: the four factors of :class:`~orchestrator.predict.perfmodel.machine.Efficiency` (matmul,
memory, network fractions and the launch cost per op) that minimise the mean absolute log
error of predicted against measured step time over the runs of one device model (and site),
by coordinate descent in log space from the defaults (a few hundred model evaluations a run:
well under a second for hundreds of runs). Factors stay within physical bounds (fractions in
(0, 1], or up to 2 for the nominal CPU peak, which a core may beat).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import yaml

from orchestrator.predict.perfmodel.machine import Efficiency, Machine

FILE_NAME = "calibration.yaml"
# Bounds of each factor (the CPU's nominal peak may be beaten: its matmul fraction may pass 1).
BOUNDS = {"matmul": (0.01, 2.0), "memory": (0.01, 2.0), "network": (0.01, 1.0), "op_overhead_us": (0.0, 5000.0)}


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
    if not path.is_file():
        return []
    doc = yaml.safe_load(path.read_text()) or {}
    return list(doc.get("entries") or [])


def efficiency_for(machine: Machine, state_dir: Path | None = None) -> Efficiency | None:
    """The fitted factors for this machine: its site and device model, else the device model on
    any site, else None (the defaults apply)."""
    try:
        entries = _load(calibration_path(state_dir))
    except (OSError, yaml.YAMLError):
        return None
    site = machine.name
    for match in (lambda e: e.get("site") == site and e.get("device_model") == machine.device_model,
                  lambda e: e.get("device_model") == machine.device_model):
        for entry in reversed(entries):
            if match(entry):
                return Efficiency(float(entry["matmul"]), float(entry["memory"]),  # type: ignore[arg-type]
                                  float(entry["network"]), float(entry["op_overhead_us"]),  # type: ignore[arg-type]
                                  f"fitted by orch calibrate on {entry.get('runs')} run(s) of {entry.get('site')} "
                                  f"({entry.get('fitted_at')})")
    return None


def mean_abs_error(samples: Sequence[Sample], efficiency: Efficiency | None = None) -> float:
    """Mean |predicted - measured| / measured of the samples' step times."""
    errors = []
    for s in samples:
        machine = s.machine if efficiency is None else s.machine.with_efficiency(efficiency)
        errors.append(abs(s.predict(machine) - s.measured_s) / s.measured_s)
    return sum(errors) / len(errors) if errors else float("nan")


def _log_loss(samples: Sequence[Sample], efficiency: Efficiency) -> float:
    total = 0.0
    for s in samples:
        predicted = s.predict(s.machine.with_efficiency(efficiency))
        total += abs(math.log(max(predicted, 1e-12) / s.measured_s))
    return total / len(samples)


def fit(samples: Sequence[Sample], start: Efficiency) -> Efficiency:
    """The factors minimising the mean absolute log error over ``samples`` (coordinate descent)."""
    if not samples:
        return start
    best = start
    best_loss = _log_loss(samples, best)
    step = 2.0
    while step > 1.01:
        improved = False
        for name, (low, high) in BOUNDS.items():
            for factor in (step, 1 / step):
                value = getattr(best, name)
                # The launch cost may start at 0: move it additively from there.
                new = value * factor if value > 0 else (1.0 if factor > 1 else 0.0)
                new = min(high, max(low, new))
                if new == value:
                    continue
                candidate = replace(best, **{name: new})  # type: ignore[arg-type]  # a float field, named
                loss = _log_loss(samples, candidate)
                if loss < best_loss - 1e-9:
                    best, best_loss, improved = candidate, loss, True
        if not improved:
            step = math.sqrt(step)
    return replace(best, source="fitted")


def rounded(efficiency: Efficiency) -> Efficiency:
    """The factors as calibration.yaml stores them, so what `orch calibrate` reports is what a
    later prediction reads back."""
    return replace(efficiency, matmul=round(efficiency.matmul, 6), memory=round(efficiency.memory, 6),
                   network=round(efficiency.network, 6), op_overhead_us=round(efficiency.op_overhead_us, 3))


def store(efficiency: Efficiency, machine: Machine, *, runs: int, error_before: float, error_after: float,
          state_dir: Path | None = None) -> Path:
    """Add (or replace) the entry of this machine's site and device model in calibration.yaml."""
    path = calibration_path(state_dir)
    entries = [e for e in _load(path)
               if not (e.get("site") == machine.name and e.get("device_model") == machine.device_model)]
    efficiency = rounded(efficiency)
    entries.append({
        "site": machine.name, "device_type": machine.device_type, "device_model": machine.device_model,
        "matmul": efficiency.matmul, "memory": efficiency.memory,
        "network": efficiency.network, "op_overhead_us": efficiency.op_overhead_us,
        "runs": runs, "mean_step_error_before": round(error_before, 4), "mean_step_error_after": round(error_after, 4),
        "fitted_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text("# Efficiency factors fitted by `orch calibrate` (orchestrator/predict/perfmodel/calibration.py).\n"
                   + yaml.safe_dump({"entries": entries}, sort_keys=False))
    tmp.replace(path)
    return path
