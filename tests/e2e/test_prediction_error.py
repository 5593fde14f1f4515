"""Memory predicted at plan time, stored per run and set beside the measured peak: a tiny local
sweep through ``orch plan`` and ``orch run`` to the ``prediction_error`` view (issue 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_orch, write

SWEEP = """\
name: predmem
experiments:
  - name: strategies
    workload: gpt2
    sites: [local]
    walltime: "00:10:00"
    grid: {model: tiny, devices: [1, 2], strategy: [ddp, fsdp-full], precision: fp32, batch_size: 2,
           seq_len: 32, vocab_size: 256, warmup: 1, iters: 1}
"""


def test_plan_shows_stores_and_compares_the_predicted_peak(workdir: Path) -> None:
    env = {"ORCH_MEMORY_CACHE": str(workdir / "memory-cache")}
    sweep = write(workdir / "predmem.yaml", SWEEP)
    planned = json.loads(run_orch("plan", "--json", str(sweep), cwd=workdir, env=env, check=True).stdout)
    predicted = {r["run_id"]: r["mem_gb"] for r in planned["runs"]}
    assert len(predicted) == 4 and all(gb is not None and gb > 0 for gb in predicted.values()), planned["runs"]
    table = run_orch("plan", "--dry-run", str(sweep), cwd=workdir, env=env, check=True).stdout
    assert "mem_gb" in table

    run_orch("run", str(sweep), cwd=workdir, env=env, check=True, timeout=900)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT * FROM prediction_error", cwd=workdir, env=env,
                               check=True).stdout)
    assert sorted(r["run_id"] for r in rows) == sorted(predicted), "one row per completed run"
    for row in rows:
        # The plan prints 3 significant digits of what it stores.
        assert row["predicted_peak_gb"] == pytest.approx(predicted[row["run_id"]], rel=0.01)
        # CPU runs report peak_tensor_bytes: the measured side is it, not the process's RSS.
        assert row["measured_peak_gb"] == row["peak_tensor_gb"] and row["peak_tensor_gb"] > 0
        assert abs(row["memory_error"]) <= 0.10, row
