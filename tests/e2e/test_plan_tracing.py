"""A first `orch plan` of new model shapes traces their memory side by side, in worker processes
(workloads/memory.py: prefetch), and plans exactly what one process tracing them in turn plans."""

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
    env = {"ORCH_MEMORY_CACHE": str(tmp_path / cache), "ORCH_TRACE_WORKERS": workers}
    proc = run_orch("plan", str(sweep), "--dry-run", "--json", cwd=tmp_path, env=env, check=True)
    return json.loads(proc.stdout)["runs"], proc.stderr


def test_a_first_plan_traces_side_by_side_and_plans_what_one_process_plans(tmp_path: Path) -> None:
    sweep = write(tmp_path / "s.yaml", SWEEP)
    side_by_side, told = _plan(tmp_path, sweep, "two", "2")
    assert "up to 2 at a time" in told and "new shape(s) in" in told, told
    one_by_one, _ = _plan(tmp_path, sweep, "one", "1")
    assert len(side_by_side) == 12 and all(r["mem_gb"] for r in side_by_side)
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
