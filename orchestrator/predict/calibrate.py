"""`orch calibrate`: fit the time model's efficiency factors to measured runs in the database.

Every completed run the model applies to (gpt2-like workloads, gemm) gives a sample: its
shape and layout, the site's machine, and the measured step (the median timed step, else the
mean). Per site (and system) the factors are fitted (orchestrator/predict/perfmodel/calibration.py)
and stored in ``.orch/calibration.yaml``, which every later prediction on that device reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from orchestrator.errors import UserError
from orchestrator.predict.perfmodel.calibration import (
    Sample,
    efficiency_for,
    fit,
    free_factors,
    held_out_error,
    mean_abs_error,
    rounded,
    store,
)
from orchestrator.predict.perfmodel.machine import (
    DEFAULT_EFFICIENCY,
    FALLBACK_EFFICIENCY,
    Efficiency,
    Machine,
    machine_from_site,
)
from orchestrator.predict.perfmodel.runmodel import RunModel, run_model

_QUERY = """
SELECT rr.run_id, rr.sweep, rr.site, rr.system, rr.workload, rr.devices, rr.precision, rr.strategy,
       rr.batch_size, rr.seq_len, COALESCE(rr.step_time_p50_s, rr.step_time_s) AS measured_s, ru.params
FROM result_rows rr JOIN runs ru ON ru.id = rr.run_id
WHERE rr.status = 'completed' AND COALESCE(rr.step_time_p50_s, rr.step_time_s) > 0
"""


@dataclass
class Fitted:
    site: str
    device_model: str
    runs: int
    error_before: float
    error_after: float
    efficiency: Efficiency
    stored: Path | None
    error_held_out: float | None = None  # leave-one-out (cross-validated) error of the fit
    free: tuple[str, ...] = ()  # the factors the fit freed (none: refused, too few runs)

    def row(self) -> list[Any]:
        e = self.efficiency
        held = None if self.error_held_out is None else round(self.error_held_out, 4)
        return [self.site, self.device_model, self.runs, round(self.error_before, 4), round(self.error_after, 4),
                held, ",".join(self.free) or "refused: one run frees no factor", e.matmul, e.memory, e.network,
                e.op_overhead_us, e.step_overhead_ms]


COLUMNS = ["site", "device", "runs", "mean_step_error_before", "mean_step_error_after", "mean_step_error_held_out",
           "fitted", "matmul", "memory", "network", "op_overhead_us", "step_overhead_ms"]


def samples_by_site(engine: Engine, *, sweep: str | None = None, site: str | None = None,
                    sites_dirs: list[Path] | None = None) -> dict[str, tuple[Machine, list[Sample]]]:
    """The measured runs the model applies to, by site (``site:system``), each with its machine
    (default efficiency factors: a fit starts from them)."""
    from orchestrator.sites.profiles import load_site
    from workloads import registry

    query, binds = _QUERY, {}
    if sweep:
        query += " AND rr.sweep = :sweep"
        binds["sweep"] = sweep
    with engine.connect() as conn:
        rows = conn.execute(text(query), binds).mappings().all()
    machines: dict[str, Machine | None] = {}
    out: dict[str, tuple[Machine, list[Sample]]] = {}
    for row in rows:
        target = f"{row['site']}:{row['system']}" if row["system"] else row["site"]
        if site and target != site and row["site"] != site:
            continue
        if target not in machines:
            try:
                profile = load_site(target, sites_dirs)
                found = machine_from_site(profile)
                machines[target] = found.with_efficiency(
                    DEFAULT_EFFICIENCY.get(found.device_type, FALLBACK_EFFICIENCY))
            except (UserError, ValueError):
                machines[target] = None  # a site no longer known, or a device without a peak
        machine = machines[target]
        if machine is None:
            continue
        try:
            values = {**registry.get(row["workload"]).defaults(), **json.loads(row["params"] or "{}")}
        except (KeyError, ValueError):
            continue
        model = run_model(row["workload"], values, devices=int(row["devices"]), precision=row["precision"],
                          strategy=row["strategy"], batch_size=row["batch_size"], seq_len=row["seq_len"])
        if model is None:
            continue
        entry = out.setdefault(target, (machine, []))
        entry[1].append(Sample(machine, _predictor(model), float(row["measured_s"])))
    return out


def _predictor(model: RunModel) -> Any:
    return lambda machine: model.step_s(machine)


def calibrate(engine: Engine, *, sweep: str | None = None, site: str | None = None,
              sites_dirs: list[Path] | None = None, state_dir: Path | None = None,
              dry_run: bool = False) -> list[Fitted]:
    """Fit and (unless ``dry_run``) store the factors of every site with measured runs."""
    groups = samples_by_site(engine, sweep=sweep, site=site, sites_dirs=sites_dirs)
    if not groups:
        where = f" of sweep {sweep!r}" if sweep else ""
        raise UserError(f"no completed runs{where} the time model applies to (gpt2-like workloads, gemm) "
                        f"with a measured step time: run some first")
    fitted: list[Fitted] = []
    for target, (machine, samples) in sorted(groups.items()):
        current = efficiency_for(machine, state_dir) or machine.efficiency  # what predictions use now
        before = mean_abs_error(samples, current)
        free = free_factors(len(samples))
        if not free:  # under-determined: one run cannot tell the factors apart; nothing stored
            fitted.append(Fitted(target, machine.device_model, len(samples), before, before, current, None))
            continue
        best = rounded(fit(samples, machine.efficiency))  # as stored: what predictions will read back
        after = mean_abs_error(samples, best)
        if after > before:  # rounding, or factors in use that beat the defaults: keep the better
            best, after = current, before
        held = held_out_error(samples, machine.efficiency)
        path = None if dry_run else store(best, machine, runs=len(samples), error_before=before, error_after=after,
                                          state_dir=state_dir, error_held_out=held)
        fitted.append(Fitted(target, machine.device_model, len(samples), before, after, best, path, held, free))
    return fitted
