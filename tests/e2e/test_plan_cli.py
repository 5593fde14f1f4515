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


@pytest.mark.parametrize("old, new, expected", [
    # Issue 27: no "did you mean", and an unknown site had no file:line.
    ("sites: [local]", "sites: [locl]",
     "s.yaml:5: experiments[0].sites[0]: unknown site 'locl' (did you mean 'local'?)"),
    ("workload: gemm", "workload: gem", "s.yaml:4: experiments[0].workload: unknown workload 'gem' (did you mean "
                                        "'gemm' or 'genslm'?)"),
    ("m: 64", "mm: 64", "s.yaml:9: experiments[0].grid.mm: unknown field for workload gemm (did you mean 'm'?)"),
])
def test_a_near_miss_is_named_where_it_is(workdir: Path, old: str, new: str, expected: str) -> None:
    sweep = write(workdir / "s.yaml", SWEEP.replace(old, new))
    proc = run_orch("plan", str(sweep), "--dry-run", cwd=workdir)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {workdir}/{expected}"), proc.stderr


def test_every_view_exports_and_attempts_filter_by_sweep(workdir: Path) -> None:
    run_orch("plan", str(write(workdir / "s.yaml", SWEEP)), cwd=workdir, check=True)
    for view in ("inference", "prediction_error", "reference_check", "attempts", "runs"):
        proc = run_orch("export", "--view", view, "--sweep", "plan-demo", "-f", "json", cwd=workdir)
        assert proc.returncode == 0 and isinstance(json.loads(proc.stdout), list), (view, proc.stderr)
    runs = json.loads(run_orch("export", "--view", "runs", "--sweep", "plan-demo", "-f", "json", cwd=workdir).stdout)
    assert len(runs) == 9
    proc = run_orch("export", "--view", "infrence", cwd=workdir)
    assert proc.returncode == 2 and "got 'infrence' (did you mean 'inference'?)" in proc.stderr


def test_missing_sweep_file(workdir: Path) -> None:
    proc = run_orch("plan", "nope.yaml", cwd=workdir)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: nope.yaml: file not found"


TWO_WORKLOADS = """\
name: two
experiments:
  - name: mm
    workload: gemm
    sites: [local]
    walltime: 10
    grid: {m: [64, 128], precision: [fp32, fp8]}
  - name: lm
    workload: gpt2
    sites: [local]
    walltime: 10
    grid: {model: tiny, strategy: [ddp, fsdp-full], devices: [1, 2], batch_size: 2, seq_len: 32}
"""


def test_the_plan_fits_120_columns_one_line_a_run_naming_every_swept_axis(workdir: Path) -> None:
    # Issue 27: 17 columns of 4 characters and params folded into 12-line cells.
    sweep = write(workdir / "two.yaml", TWO_WORKLOADS)
    runs = json.loads(run_orch("plan", str(sweep), "--dry-run", "--json", cwd=workdir, check=True).stdout)["runs"]
    text = run_orch("plan", str(sweep), "--dry-run", cwd=workdir, env={"COLUMNS": "120"}, check=True).stdout
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 120
    header = next(line for line in lines if line.startswith("run_id"))
    for axis in ("experiment", "workload", "dev", "precision", "m", "model", "strategy", "batch_size", "seq_len"):
        assert f" {axis} " in f" {header} ", (axis, header)
    assert "sweep two, site local" in text  # what every run shares: said once
    for run in runs:  # each run on one line, whole: its id, its status and its values
        [line] = [line for line in lines if line.startswith(run["run_id"])]
        assert run["status"] in line and "…" not in line
        if run["status"] == "skipped":
            number = line.split("[")[1].split("]")[0]
            assert f"[{number}] {run['reason']}" in text


def test_show_prints_each_script_unfolded_so_a_copy_runs(workdir: Path) -> None:
    import subprocess

    sweep = write(workdir / "two.yaml", TWO_WORKLOADS)
    out = run_orch("plan", str(sweep), "--show", cwd=workdir, env={"COLUMNS": "60"}, check=True).stdout
    scripts = sorted((workdir / ".orch" / "runs").rglob("job.sh"))
    assert len(scripts) == 6
    for script in scripts:
        body = script.read_text()
        assert max(len(line) for line in body.splitlines()) > 60  # the launcher line is long
        assert body.rstrip("\n") in out, f"{script} is not printed as written"
        pasted = workdir / "pasted.sh"  # as a user would copy it from the terminal into a file
        start = out.index(body.rstrip("\n"))
        pasted.write_text(out[start:start + len(body.rstrip("\n"))] + "\n")
        assert subprocess.run(["bash", "-n", str(pasted)], capture_output=True).returncode == 0


def test_sites_show_keeps_the_profiles_source_comments(workdir: Path) -> None:
    # Issue 27: it printed a dump of the values, without the comments that cite each one's source.
    from tests.conftest import REPO

    text = (REPO / "sites" / "dgx.yaml").read_text()
    shown = run_orch("sites", "show", "dgx", cwd=workdir, check=True).stdout
    assert text.rstrip("\n") in shown and "# hardware.md: 80 GB, 3350 GB/s" in shown
    merged = run_orch("sites", "show", "dgx:a100_80", cwd=workdir, check=True).stdout
    assert merged.startswith("# dgx:a100_80: the values as they apply (the file, with each value's source: ")
    assert "A100" in merged
