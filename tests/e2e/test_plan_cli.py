"""`orch plan` through the real CLI: idempotent planning, one-line errors, nothing written on error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_orch, write

SWEEP = """\
name: plan-demo
experiments:
  - name: g
    workload: gemm
    sites: [local]
    grid:
      devices: [1, 2, 8]
      precision: [fp32, bf16, fp16]
      m: 64
"""


def test_plan_twice_adds_nothing_the_second_time(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", SWEEP)
    first = json.loads(run_orch("plan", str(sweep), "--json", cwd=workdir, check=True).stdout)
    second = json.loads(run_orch("plan", str(sweep), "--json", cwd=workdir, check=True).stdout)
    assert first["new"] == 9 and second["new"] == 0
    assert [r["run_id"] for r in first["runs"]] == [r["run_id"] for r in second["runs"]]
    assert not any(r["new"] for r in second["runs"])
    text = run_orch("plan", str(sweep), cwd=workdir, check=True).stdout
    assert "planned 0 new" in text


def test_skipped_runs_are_kept_with_their_reason(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", SWEEP)
    out = json.loads(run_orch("plan", str(sweep), "--json", cwd=workdir, check=True).stdout)
    reasons = {(r["devices"], r["precision"]): r["reason"] for r in out["runs"] if r["status"] == "skipped"}
    assert "precision fp16 not supported by host-cpu" in reasons[(1, "fp16")]
    assert "8 devices requested, local has at most 4" in reasons[(8, "fp32")]
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT status, count(*) AS n FROM runs GROUP BY status",
                               cwd=workdir, check=True).stdout)
    assert {r["status"]: r["n"] for r in rows} == {"planned": 4, "skipped": 5}


def test_show_prints_the_scripts(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", SWEEP)
    out = run_orch("plan", str(sweep), "--show", cwd=workdir, check=True).stdout
    assert out.count("#!/bin/bash") == 4 and "torch.distributed.run" in out


@pytest.mark.parametrize("broken, where, field", [
    (SWEEP.replace("precision: [fp32, bf16, fp16]", "precision: [fp32, bf16"), "s.yaml:", None),
    (SWEEP.replace("workload: gemm", "workload: nope"), "s.yaml:4:", "experiments[0].workload"),
    (SWEEP.replace("m: 64", "m: sixty-four"), "s.yaml:9:", "experiments[0].grid.m"),
    (SWEEP.replace("    sites: [local]", "    sites: [local]\n    nodes: 3"), "s.yaml:6:", "experiments[0].nodes"),
])
def test_bad_sweeps_exit_2_with_one_line_and_write_nothing(workdir: Path, broken: str, where: str,
                                                           field: str | None) -> None:
    sweep = write(workdir / "s.yaml", broken)
    proc = run_orch("plan", str(sweep), cwd=workdir)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr
    assert where in lines[0] and (field is None or field in lines[0])
    assert not (workdir / ".orch").exists()


def test_unknown_site_is_a_clear_error(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", SWEEP.replace("sites: [local]", "sites: [atlantis]"))
    proc = run_orch("plan", str(sweep), cwd=workdir)
    assert proc.returncode == 2 and "unknown site 'atlantis'" in proc.stderr and "local" in proc.stderr


def test_missing_sweep_file(workdir: Path) -> None:
    proc = run_orch("plan", "nope.yaml", cwd=workdir)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: nope.yaml: file not found"
