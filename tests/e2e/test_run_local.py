"""`orch run` on the embedded default, end to end: real processes, real torch, real SQLite."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write

SWEEP = """\
name: e2e
experiments:
  - name: gemm
    workload: gemm
    sites: [local]
    walltime: "00:05:00"
    grid:
      devices: [1, 2]
      precision: [fp32, bf16]
      m: 128
      n: 128
      k: 128
      warmup: 2
      iters: 5
      tag: "$(touch {canary}); rm -rf ~"
"""


def test_orch_run_local_to_results_rows(workdir: Path, db_url: str) -> None:
    """The whole flow, on SQLite and on PostgreSQL."""
    canary = workdir / "pwned"
    sweep = write(workdir / "quick.yaml", SWEEP.format(canary=canary))
    db = {"ORCH_DB_URL": db_url}
    proc = run_orch("run", str(sweep), "--site", "local", cwd=workdir, env=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "results of e2e" in proc.stdout and "completed" in proc.stdout

    rows = json.loads(run_orch("sql", "--format", "json",
                               "SELECT workload, precision, devices, tflops, status, params, node_list, job_id "
                               "FROM results", cwd=workdir, env=db, check=True).stdout)
    assert sorted((r["precision"], r["devices"]) for r in rows) == [("bf16", 1), ("bf16", 2), ("fp32", 1), ("fp32", 2)]
    assert all(r["workload"] == "gemm" and r["status"] == "completed" and r["tflops"] > 0 for r in rows)
    assert all(r["job_id"] and r["node_list"] == "localhost" for r in rows)
    # The hostile tag travelled as data and was never executed.
    assert all(json.loads(r["params"])["tag"].startswith("$(touch") for r in rows)
    assert not canary.exists()

    # Provenance: each result leads to its script, its sweep text and its environment.
    prov = json.loads(run_orch("sql", "-f", "json",
                               "SELECT r.script, s.content, e.torch, m.world_size, r.devices FROM runs r "
                               "JOIN sweeps s ON s.id = r.sweep_id JOIN attempts a ON a.run_id = r.id "
                               "JOIN metrics m ON m.attempt_id = a.id "
                               "LEFT JOIN environments e ON e.id = m.environment_id",
                               cwd=workdir, env=db, check=True).stdout)
    assert len(prov) == 4
    for row in prov:
        assert row["script"].startswith("#!/bin/bash") and "name: e2e" in row["content"]
        assert row["torch"] and row["world_size"] == row["devices"]

    # Running the same sweep again finds everything done: nothing new is submitted.
    again = run_orch("run", str(sweep), "--site", "local", "--json", cwd=workdir, env=db, check=True)
    assert len(json.loads(again.stdout)) == 4
    assert json.loads(run_orch("sql", "-f", "json", "SELECT count(*) AS n FROM attempts",
                               cwd=workdir, env=db, check=True).stdout) == [{"n": 4}]


def test_status_json_and_submit_dry_run(workdir: Path) -> None:
    sweep = write(workdir / "quick.yaml", SWEEP.format(canary=workdir / "x").replace("devices: [1, 2]", "devices: [1]"))
    run_orch("plan", str(sweep), cwd=workdir, check=True)
    dry = json.loads(run_orch("submit", "--dry-run", "--json", cwd=workdir, check=True).stdout)
    assert len(dry["would_submit"]) == 2 and dry["submitted"] == []
    submitted = json.loads(run_orch("submit", "--sweep", "e2e", "--json", cwd=workdir, check=True).stdout)
    assert len(submitted["submitted"]) == 2
    # A second submit finds nothing left to submit.
    again = run_orch("submit", "--json", cwd=workdir)
    assert again.returncode == 1 and json.loads(again.stdout)["submitted"] == []
    assert "2 submitted" in json.loads(again.stdout)["nothing_submitted"]
    final = json.loads(run_orch("status", "--watch", "--interval", "0.5", "--json", cwd=workdir, check=True).stdout)
    assert final["counts"] == {"finished": 2} and final["total"] == 2
    assert final["polls"] >= 1 and final["scheduler_calls"]  # jobs were in flight: the executor was asked
    # Nothing in flight any more: status answers from the database alone, asking no scheduler.
    idle = json.loads(run_orch("status", "--json", cwd=workdir, check=True).stdout)
    assert idle == {"counts": {"finished": 2}, "total": 2, "polls": 0, "scheduler_calls": {}}
    table = run_orch("status", cwd=workdir, check=True).stdout
    assert "finished" in table and "2" in table
