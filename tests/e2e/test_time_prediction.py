"""Time predictions in the flow (issue 11, item 3): `orch plan` shows each run's predicted step
and run time and the campaign's node-hours and cost, stores them per run, and `walltime: auto`
takes the prediction plus the stated margin; migration 0008 on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator.plan.resolve import AUTO_MARGIN, AUTO_STARTUP_S, auto_walltime
from tests.conftest import run_orch, write

SWEEP = """\
name: ptime
experiments:
  - name: lm
    workload: gpt2
    sites: [local, polaris]
    walltime: auto
    grid: {model: [tiny, gpt2], devices: [1, 4], strategy: [ddp, zero3], precision: fp32, batch_size: 2,
           seq_len: 64, warmup: 1, iters: 3}
  - name: mm
    workload: gemm
    sites: [local]
    grid: {m: 512}
  - name: act
    workload: relu
    sites: [local]
    grid: {shape: deepbench-0}
"""


def test_plan_shows_and_stores_predicted_times_and_cost(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", SWEEP)
    env = {"ORCH_POLARIS_PROJECT": "demo"}
    out = json.loads(run_orch("plan", "--json", str(sweep), cwd=workdir, env=env, check=True).stdout)
    runs = out["runs"]
    lm = [r for r in runs if r["workload"] == "gpt2"]
    assert len(lm) == 16 and all(r["status"] == "planned" for r in runs)
    assert all(r["step_s"] > 0 and r["run_s"] > 0 for r in lm)
    # Larger model, longer step; the run is warm-up + timed steps.
    for r in lm:
        assert r["run_s"] == pytest.approx(r["step_s"] * 4, rel=0.01)
    by = {(r["site"], "model=gpt2" in r["params"], r["devices"], "zero3" in r["params"]): r["step_s"] for r in lm}
    assert by[("local", True, 1, False)] > 10 * by[("local", False, 1, False)]
    assert by[("polaris", True, 1, False)] < by[("local", True, 1, False)] / 10  # an A100 is faster than a core
    gemm = next(r for r in runs if r["workload"] == "gemm")
    assert gemm["step_s"] > 0  # a roofline of 2mnk FLOPs
    relu = next(r for r in runs if r["workload"] == "relu")
    assert relu["step_s"] is None and relu["run_s"] is None  # no time model: blank
    cost = out["predicted"]
    assert cost["runs"] == 18 and cost["with_prediction"] == 17 and cost["node_hours"] > 0
    assert cost["cost"]["USD"] > 0
    # Stored per run, and walltime: auto is the prediction x margin + start-up, in whole minutes.
    engine = sa.create_engine(f"sqlite:///{workdir / '.orch' / 'orch.db'}")
    with engine.connect() as conn:
        stored = {row.id: row for row in conn.execute(sa.text(
            "SELECT id, workload, predicted_step_s, predicted_run_s, walltime_s FROM runs"))}
    for r in lm:
        row = stored[r["run_id"]]
        assert row.predicted_step_s == pytest.approx(r["step_s"], rel=0.01)
        assert row.walltime_s == auto_walltime(row.predicted_run_s)
        assert row.walltime_s >= row.predicted_run_s * AUTO_MARGIN + AUTO_STARTUP_S and row.walltime_s % 60 == 0
    assert stored[gemm["run_id"]].walltime_s == 30 * 60  # a given walltime is kept

    text = run_orch("plan", "--dry-run", str(sweep), cwd=workdir, env=env, check=True).stdout
    assert "step_s" in text and "run_s" in text
    assert "predicted:" in text and "node-hours for 17 of 18 runnable run(s)" in text and "USD" in text


def test_walltime_auto_without_a_prediction_is_skipped_with_the_reason(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", """\
name: noauto
experiments:
  - name: act
    workload: relu
    sites: [local]
    walltime: auto
    grid: {shape: deepbench-0}
""")
    out = json.loads(run_orch("plan", "--json", str(sweep), cwd=workdir, check=True).stdout)
    (run,) = out["runs"]
    assert run["status"] == "skipped" and "walltime: auto needs a predicted run time" in run["reason"]


def test_migration_0008_adds_time_predictions(workdir: Path, db_url: str) -> None:
    """A database at 0007 with a completed run upgrades in place: the new columns are there,
    and prediction_error sets the predicted step beside the measured median step."""
    from orchestrator.results.db.engine import current_revision, make_engine, upgrade

    engine = make_engine(db_url)
    upgrade(engine, "0007")
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT predicted_peak_gb FROM runs"))
    upgrade(engine, "0008")
    assert current_revision(engine) == "0008"
    inspector = sa.inspect(engine)
    columns = {c["name"] for c in inspector.get_columns("runs")}
    assert {"predicted_step_s", "predicted_run_s"} <= columns
    view = {c["name"] for c in inspector.get_columns("prediction_error")}
    assert {"predicted_step_s", "measured_step_s", "step_error", "predicted_run_s", "memory_error"} <= view
    engine.dispose()


CALIBRATION_SWEEP = """\
name: calib
experiments:
  - name: lm
    workload: gpt2
    sites: [local]
    walltime: "00:10:00"
    zip:
      shape: {model: [tiny, tiny, gpt-nano], batch_size: [2, 8, 4], seq_len: [32, 64, 48]}
    grid: {devices: 1, precision: fp32, vocab_size: 256, warmup: 1, iters: 4}
"""


def test_calibrate_fits_measured_runs_and_predictions_use_it(workdir: Path) -> None:
    sweep = write(workdir / "calib.yaml", CALIBRATION_SWEEP)
    run_orch("run", str(sweep), cwd=workdir, check=True, timeout=900)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT * FROM prediction_error", cwd=workdir, check=True).stdout)
    assert len(rows) == 3 and all(r["predicted_step_s"] > 0 and r["measured_step_s"] > 0 for r in rows)
    assert all(r["step_error"] is not None for r in rows)
    (fitted,) = json.loads(run_orch("calibrate", "--sweep", "calib", "--json", cwd=workdir, check=True).stdout)
    assert fitted["site"] == "local" and fitted["runs"] == 3
    assert fitted["mean_step_error_after"] < fitted["mean_step_error_before"]
    assert (workdir / ".orch" / "calibration.yaml").is_file()
    out = json.loads(run_orch("predict", "--model", "tiny", "--devices", "1", "--site", "local", "--seq-len", "32",
                              "--json", cwd=workdir, check=True).stdout)
    assert out["efficiency"]["source"].startswith("fitted") and out["efficiency"]["matmul"] == fitted["matmul"]
    again = run_orch("calibrate", "--sweep", "nothing-here", cwd=workdir)
    assert again.returncode == 2 and "no completed runs of sweep 'nothing-here'" in again.stderr
