"""The time model's cost of sharding on few devices, fitted on one day's GPU runs and checked on another.

Issue 50: on one H200, gpt2-medium's step under FSDP2 and DeepSpeed ZeRO-2 took 1.5-1.9x DDP's, where
the time model predicted DDP's step. ``perfmodel/transformer.py`` now charges what sharding costs
beside its collectives' bytes (``FSDP_CALL_S`` per FSDP unit and call, ``DS_PARAM_S`` per parameter
tensor and ZeRO-1/2 reduction, module comments). This script

1. reads the device check's runs of one day (``--fit``, default 2026-11-27: its ``plan.json`` for each
   run's parameters, its ``prediction_error.json`` for the measured median step),
2. finds each constant by least squares on the relative step error of that day's one-GPU runs of its
   strategy family (FSDP: fsdp-full and fsdp-grad-op; ZeRO-1/2), every other factor as it stands,
3. prints each run's step before (constants 0) and after, on the fit day and on ``--check`` days
   (default 2026-11-28: the same shapes on another H200, so a repeat, not a held-out source),
4. and, with ``--predict SWEEP``, the step the model gives each run of a sweep not run yet (the
   prepared gpt2-xl sweep): the held-out test, recorded in benchmarks/RESULTS.md before it runs.

    python -m benchmarks.sharding_cost [--fit DIR] [--check DIR ...] [--predict SWEEP]

The fitted constants are copied into transformer.py by hand, rounded to 2 significant figures.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.predict.perfmodel import transformer
from orchestrator.predict.perfmodel.machine import Machine, machine_from_site
from orchestrator.predict.perfmodel.runmodel import RunModel, run_model
from orchestrator.sites.profiles import load_site
from workloads import registry

HERE = Path(__file__).parent / "device-check"
FAMILIES = {"FSDP_CALL_S": ("fsdp-full", "fsdp-grad-op"), "DS_PARAM_S": ("zero1", "zero2")}


@dataclass
class Row:
    label: str
    strategy: str
    model: RunModel
    measured_s: float


def _values(params: str) -> dict[str, Any]:
    """``k=v k=v`` as plan.json prints a run's parameters."""
    return dict(part.split("=", 1) for part in params.split())


def _plans() -> dict[str, dict[str, Any]]:
    """Every planned run of the device checks kept here, by run id: a day without its own plan.json
    ran the same sweep as one with it (run ids are content hashes, equal for equal runs)."""
    plans: dict[str, dict[str, Any]] = {}
    for path in sorted(HERE.glob("*/plan.json")):
        plan, _ = json.JSONDecoder().raw_decode(path.read_text())  # the plan, then orch run's summary
        plans.update({r["run_id"]: r for r in plan["runs"]})
    return plans


def day_rows(folder: Path) -> list[Row]:
    """The one-device sharded gpt2 runs of a device-check folder with their measured median step."""
    measured = {r["run_id"]: r for r in json.loads((folder / "prediction_error.json").read_text())}
    plans = _plans()
    rows = []
    for run_id, m in measured.items():
        if m["workload"] != "gpt2" or m["strategy"] in (None, "ddp") or not m.get("measured_step_s"):
            continue
        if run_id not in plans:
            print(f"{folder.name}: run {run_id} is in no plan.json kept here: left out")
            continue
        params = _values(plans[run_id]["params"])
        values = {**registry.get("gpt2").defaults(), **params}
        model = run_model("gpt2", values, devices=m["devices"], precision=m["precision"], strategy=m["strategy"],
                          batch_size=m["batch_size"], seq_len=m["seq_len"])
        if model is None:
            continue
        ckpt = " +ckpt" if model.layout.recompute else ""
        rows.append(Row(f"{values.get('model')} {m['strategy']}{ckpt}", m["strategy"], model, m["measured_step_s"]))
    return sorted(rows, key=lambda r: r.label)


def _machine() -> Machine:
    return machine_from_site(load_site("gpu-box:h200"))


def fit(rows: list[Row], machine: Machine, name: str) -> float | None:
    """The constant ``name`` minimising the squared relative step error over its family's rows: the
    step is linear in it, so the least-squares value is closed-form."""
    family = [r for r in rows if r.strategy in FAMILIES[name]]
    if not family:
        return None
    setattr(transformer, name, 0.0)
    base = [r.model.step_s(machine) for r in family]
    setattr(transformer, name, 1.0)
    slope = [r.model.step_s(machine) - b for r, b in zip(family, base)]
    setattr(transformer, name, 0.0)
    # minimise sum(((b + c k - y) / y)^2): c = sum(k (y - b) / y^2) / sum(k^2 / y^2)
    num = sum(k * (r.measured_s - b) / r.measured_s**2 for r, b, k in zip(family, base, slope))
    den = sum(k * k / r.measured_s**2 for r, k in zip(family, slope))
    return max(0.0, num / den) if den > 0 else None


def _table(title: str, rows: list[Row], machine: Machine, before: dict[str, float], after: dict[str, float]) -> None:
    print(f"\n{title}\n| run | measured | predicted before | error | predicted after | error |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        pred = {}
        for label, consts in (("before", before), ("after", after)):
            for name, value in consts.items():
                setattr(transformer, name, value)
            pred[label] = r.model.step_s(machine)
        print(f"| {r.label} | {r.measured_s * 1e3:.1f} ms | {pred['before'] * 1e3:.1f} ms | "
              f"{(pred['before'] - r.measured_s) / r.measured_s:+.0%} | {pred['after'] * 1e3:.1f} ms | "
              f"{(pred['after'] - r.measured_s) / r.measured_s:+.0%} |")


def predict_sweep(path: Path, machine: Machine) -> None:
    """The step the model gives each gpt2 run of a sweep (planned by orch itself, dry)."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    print(f"\nPredictions for {path} (gpu-box:h200), made before it runs:")
    print("| experiment | model | strategy | checkpointing | predicted step |\n|---|---|---|---|---:|")
    for exp in doc["experiments"]:
        grid = exp.get("grid", {})
        as_list = lambda v: v if isinstance(v, list) else [v]  # noqa: E731
        for model in as_list(grid.get("model", "gpt2")):
            for strategy in as_list(grid.get("strategy", "ddp")):
                for ckpt in as_list(grid.get("activation_checkpointing", "none")):
                    values = {**registry.get("gpt2").defaults(), "model": model, "activation_checkpointing": ckpt}
                    rm = run_model("gpt2", values, devices=int(as_list(grid.get("devices", 1))[0]),
                                   precision=str(as_list(grid.get("precision", "bf16"))[0]), strategy=strategy,
                                   batch_size=int(as_list(grid.get("batch_size", 8))[0]),
                                   seq_len=int(as_list(grid.get("seq_len", 1024))[0]))
                    step = rm.step_s(machine) if rm is not None else None
                    print(f"| {exp['name']} | {model} | {strategy} | {ckpt} | "
                          f"{'-' if step is None else f'{step * 1e3:.1f} ms'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", type=Path, default=HERE / "2026-11-27-h200")
    parser.add_argument("--check", type=Path, nargs="*", default=[HERE / "2026-11-28-h200"])
    parser.add_argument("--predict", type=Path, default=HERE / "2026-11-28-h200" / "gpt2-xl-strategies.yaml")
    args = parser.parse_args()
    machine = _machine()
    stored = {name: getattr(transformer, name) for name in FAMILIES}
    rows = day_rows(args.fit)
    fitted = {name: fit(rows, machine, name) for name in FAMILIES}
    after = {name: (value if value is not None else stored[name]) for name, value in fitted.items()}
    before = {name: 0.0 for name in FAMILIES}
    print("Fitted on", args.fit.name, ":", ", ".join(f"{k} = {v * 1e3:.3f} ms" for k, v in after.items()),
          f"(stored: {', '.join(f'{k} = {v * 1e3:.3f} ms' for k, v in stored.items())})")
    _table(f"Fit set: {args.fit.name}", rows, machine, before, after)
    for folder in args.check:
        _table(f"Check (the same shapes on another day): {folder.name}", day_rows(folder), machine, before, after)
    for name, value in after.items():
        setattr(transformer, name, value)
    if args.predict and args.predict.exists():
        predict_sweep(args.predict, machine)


if __name__ == "__main__":
    main()
