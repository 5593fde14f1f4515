"""A first `orch plan` of new model shapes traces their memory side by side, in worker processes
(orchestrator/predict/memory.py: prefetch), and plans exactly what one process tracing them in turn plans."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write

SWEEP = """\
name: tracing
experiments:
  - name: g
    workload: gpt2
    sites: [local]
    walltime: "00:05:00"
    grid: {model: [gpt-micro, gpt-mini], strategy: [ddp, fsdp-full, zero2], devices: [1, 2], precision: bf16,
           seq_len: 64, batch_size: 4, vocab_size: 512}
"""


def _plan(tmp_path: Path, sweep: Path, cache: str, workers: str) -> tuple[list[dict], str]:
    # An account: polaris needs one, and a site without it is refused before any trace.
    env = {"ORCH_MEMORY_CACHE": str(tmp_path / cache), "ORCH_TRACE_WORKERS": workers, "ORCH_ACCOUNT": "myproj"}
    proc = run_orch("plan", str(sweep), "--dry-run", "--json", cwd=tmp_path, env=env, check=True)
    return json.loads(proc.stdout)["runs"], proc.stderr


def test_a_first_plan_traces_side_by_side_and_plans_what_one_process_plans(tmp_path: Path) -> None:
    sweep = write(tmp_path / "s.yaml", SWEEP)
    side_by_side, told = _plan(tmp_path, sweep, "two", "2")
    assert "up to 2 at a time" in told and "new shape(s) in" in told, told
    one_by_one, _ = _plan(tmp_path, sweep, "one", "1")
    assert len(side_by_side) == 12 and all(r["mem_gb"] for r in side_by_side)
    # Each prediction says what it came from: DeepSpeed's engine is its documented states and buffers over its traced
    # forward/backward, the rest the program itself.
    assert {r["mem_from"] for r in side_by_side if "strategy=zero2" in r["params"]} == {"trace+model"}
    assert {r["mem_from"] for r in side_by_side if "strategy=zero2" not in r["params"]} == {"trace"}
    assert side_by_side == one_by_one
    again, told_again = _plan(tmp_path, sweep, "two", "2")  # all cached: nothing traced, nothing said
    assert again == side_by_side and "traced" not in told_again


def test_a_bad_worker_count_is_one_clear_line(tmp_path: Path) -> None:
    sweep = write(tmp_path / "s.yaml", SWEEP)
    env = {"ORCH_MEMORY_CACHE": str(tmp_path / "cache"), "ORCH_TRACE_WORKERS": "many"}
    proc = run_orch("plan", str(sweep), "--dry-run", cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert "ORCH_TRACE_WORKERS" in proc.stderr and "'many'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "cache").exists()  # nothing traced


UNTRACED = """\
name: untraced
experiments:
  - name: pipeline
    workload: gpt2
    sites: [local]
    walltime: "00:05:00"
    grid: {model: tiny, devices: 2, pp: 2, precision: fp32, seq_len: 32, batch_size: 2, vocab_size: 256}
  - name: too-big
    workload: gpt2
    sites: [polaris]
    walltime: "00:05:00"
    grid: {model: gpt2-xl, devices: 1, precision: fp32, seq_len: 1024, batch_size: 64}
"""


def test_a_prediction_says_when_it_is_the_formula(tmp_path: Path) -> None:
    """Pipeline stages cannot run on fake tensors: their memory is the formula's, and says so; so does
    every prediction with tracing off. A memory skip names the source of the GB it predicts."""
    sweep = write(tmp_path / "s.yaml", UNTRACED)
    runs, _ = _plan(tmp_path, sweep, "cache", "1")
    by = {r["experiment"]: r for r in runs}
    assert by["pipeline"]["mem_from"] == "formula" and by["pipeline"]["mem_gb"]
    assert by["too-big"]["status"] == "skipped" and by["too-big"]["mem_from"] == "trace"
    assert "GB tensors by trace" in by["too-big"]["reason"] and "has 40 GB" in by["too-big"]["reason"]
    env = {"ORCH_MEMORY_CACHE": str(tmp_path / "cache"), "ORCH_MEMORY_TRACE": "0", "ORCH_ACCOUNT": "myproj"}
    off = json.loads(run_orch("plan", str(sweep), "--dry-run", "--json", cwd=tmp_path, env=env, check=True).stdout)
    assert {r["mem_from"] for r in off["runs"]} == {"formula"}
    assert "GB tensors by formula" in {r["experiment"]: r for r in off["runs"]}["too-big"]["reason"]
