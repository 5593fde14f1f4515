"""Issue 25: one memory model. For one MPT-7B layout (8 devices, micro-batch 8, sequence 2048, bf16),
`orch plan`'s mem_gb, a memory skip's figure and `orch predict --json`'s memory are one number.

Before: `orch predict` 96 GB (its own formula), the FSDP trace 141 GB, DeepSpeed's trace+model 69 GB.
Now `orch predict` asks the plan's predictor (orchestrator/predict/run_memory.py) for every layout
the gpt2 workload runs. Also: the workload formula, which serves where no trace exists (pipeline
stages, FSDP over a tensor-parallel mesh), checked against the trace where both exist.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_orch

pytest.importorskip("torch")

STRATEGIES = ("ddp", "fsdp-full", "zero3")
SWEEP = """name: mpt7b-memory
experiments:
  - name: mpt
    workload: gpt2
    sites: [polaris]
    walltime: '00:10:00'
    grid: {model: mpt-7b, devices: 8, precision: bf16, batch_size: 8, seq_len: 2048, strategy: [ddp, fsdp-full, zero3]}
"""
# Layout name in `orch predict` of each strategy's run: 8-way data parallel, no recompute.
LAYOUT = {"ddp": "dp8", "fsdp-full": "dp8 fsdp-full", "zero3": "dp8 zero3"}


def shown(a: float, b: float) -> bool:
    """``a`` and ``b`` the same number as shown: mem_gb has 3 significant digits, the skip reason 0.1 GB."""
    return abs(a - b) <= max(0.051, 0.0051 * max(abs(a), abs(b)))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("memory-cache")


def test_plan_skip_and_predict_give_one_number(workdir: Path, cache: Path) -> None:
    # An account: polaris needs one, and a site without it is refused before any memory is predicted.
    env = {"ORCH_MEMORY_CACHE": str(cache), "ORCH_ACCOUNT": "myproj"}
    (workdir / "mpt.yaml").write_text(SWEEP)
    plan = json.loads(run_orch("plan", "mpt.yaml", "--dry-run", "--json", cwd=workdir, env=env, check=True).stdout)
    predicted = json.loads(run_orch("predict", "--model", "mpt-7b", "--devices", "8", "--site", "polaris",
                                    "--batch-size", "8", "--seq-len", "2048", "--precision", "bf16", "--json",
                                    cwd=workdir, env=env, check=True).stdout)
    # orch predict has no FSDP stage of its own: zero3 over data parallel is DeepSpeed's (the same
    # stage in the time model); FSDP's run is compared with the plan's trace directly below.
    layouts: dict[str, dict[str, Any]] = {r["layout"]: r for r in predicted["layouts"] if r["recompute"] == "no"}
    fixed = 1.0  # polaris's device.fixed_memory_gb, added by the skip and by orch predict alike
    runs = {re.search(r"strategy=(\S+)", r["params"]).group(1): r for r in plan["runs"]}  # type: ignore[union-attr]
    assert set(runs) == set(STRATEGIES)
    for strategy, run in runs.items():
        reason = run["reason"] or ""
        need = re.search(r"predicted to need ([\d.]+) GB per device "
                         r"\(([\d.]+) GB tensors by (\S+) \+ ([\d.]+) GB fixed", reason)
        assert need, f"{strategy}: every one of these runs is past the A100-40GB's memory: {reason}"
        total, tensors, source, fixed_shown = float(need[1]), float(need[2]), need[3], float(need[4])
        assert fixed_shown == fixed and source == run["mem_from"]
        assert shown(tensors, run["mem_gb"]) and shown(total, tensors + fixed)
        layout = layouts.get(LAYOUT[strategy])
        if layout is None:
            continue
        assert layout["memory_from"] == run["mem_from"], (strategy, layout["memory_from"])
        assert shown(layout["memory_tensors_gb"], run["mem_gb"]) and shown(layout["memory_tensors_gb"], tensors)
        assert shown(layout["memory_gb"], total) and layout["fits"] == "NO"
    assert {"ddp", "zero3"} <= {s for s in STRATEGIES if LAYOUT[s] in layouts}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp-full", "fsdp-grad-op", "zero1", "zero2", "zero3"])
@pytest.mark.parametrize("model,devices,batch,seq", [("gpt2", 4, 8, 1024), ("gpt2-xl", 8, 4, 1024)])
def test_the_formula_is_within_30_percent_of_the_trace_and_above_the_states(
        monkeypatch: pytest.MonkeyPatch, cache: Path, strategy: str, model: str, devices: int, batch: int,
        seq: int) -> None:
    """Where both exist, the workload formula (memory.gpt_training: the only prediction of pipeline
    stages and FSDP over tp) against the trace: on this machine -28% .. +15% for these shapes (the
    formula misses DDP's and FSDP's buffers, autocast's 16-bit weight copies, Adam's temporaries)."""
    from orchestrator.predict import run_memory
    from orchestrator.predict.states import model_state_bytes
    from workloads.models.configs import SIZES, total_params

    monkeypatch.setenv("ORCH_MEMORY_CACHE", str(cache))
    values = run_memory.run_values("gpt2", {"model": model, "devices": devices, "precision": "bf16",
                                            "batch_size": batch, "seq_len": seq, "strategy": strategy})
    traced = run_memory.run_bytes("gpt2", values)
    formula = run_memory.formula_bytes("gpt2", values)
    assert traced is not None and traced[1] != "formula" and formula is not None
    print(f"{model} {strategy} {devices}: trace {traced[0] / 1e9:.2f} GB, formula {formula / 1e9:.2f} GB")
    assert abs(formula - traced[0]) <= 0.30 * traced[0]
    floor = model_state_bytes(total_params(SIZES[model]), strategy, devices, "bf16")
    assert formula >= floor and traced[0] >= floor
