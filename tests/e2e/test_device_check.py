"""The device check (issue 26) on CPU: ``benchmarks/device_check.py --tiny`` goes through orch
(sweep -> plan -> local runs -> SQLite -> calibrate -> prediction_error -> report) and leaves one
folder with every workload of the GPU check in its database, the summary and the report.

The jobs read a powercap folder this test lays out (``ORCH_RAPL_ROOT``; this VM has none), with a
counter that does not move: the energy figures travel from the harness to ``metric_values`` and the
metrics file's ``energy.source`` the same way a GPU's NVML counter would, at 0 J.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.device_check import CHECKPOINTED, TINY, WORKLOADS
from tests.conftest import REPO


def test_tiny_device_check_fills_one_folder(tmp_path: Path) -> None:
    powercap = tmp_path / "powercap" / "intel-rapl:0"
    powercap.mkdir(parents=True)
    (powercap / "energy_uj").write_text("123456789\n")
    out = tmp_path / "check"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    # A core ledger of this test's own (its runs do not queue behind other suites' local runs).
    env.update({"OMP_NUM_THREADS": "1", "ORCH_LOCAL_CORES_DIR": str(tmp_path / "cores"),
                "ORCH_RAPL_ROOT": str(tmp_path / "powercap"), "ORCH_MEMORY_CACHE": str(tmp_path / "memcache")})
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "benchmarks/device_check.py", "--tiny", "--out", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - began
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert elapsed < 300, f"the tiny check took {elapsed:.0f} s (issue 26: under 5 minutes here)"

    for name in ("orch.db", "sweep.yaml", "plan.json", "summary.md", "report.html", "calibrate.txt",
                 "prediction_error.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name

    db = sqlite3.connect(out / "orch.db")
    rows = db.execute("SELECT workload, strategy, params, status FROM results WHERE sweep = 'device-check'").fetchall()
    done = [(w, s, json.loads(p)) for w, s, p, status in rows if status == "completed"]
    assert len(done) == len(rows), rows
    assert {w for w, _, _ in done} == set(WORKLOADS)
    # gpt2 under each strategy, with and without activation checkpointing, and at two sizes.
    gpt2 = {(s, p["activation_checkpointing"]) for w, s, p in done if w == "gpt2"}
    assert gpt2 == {(s, c) for s in CHECKPOINTED for c in ("none", "full")}
    assert len({p["model"] for w, _, p in done if w == "gpt2"}) == 2
    assert len({p["concurrency"] for w, _, p in done if w == "llm_inference"}) >= 2
    # GEMM: what the CPU has ran, what it lacks was skipped at plan time with the reason.
    ran = {r[0] for r in db.execute("SELECT precision FROM results WHERE workload = 'gemm'")}
    skipped = dict(db.execute("SELECT precision, skip_reason FROM runs WHERE workload = 'gemm' AND status = 'skipped'"))
    assert ran | set(skipped) == set(TINY.gemm_precisions) and ran == {"fp32", "bf16"}
    assert all("not supported" in reason for reason in skipped.values()), skipped

    # Predictions beside measurements: every gpt2 run has both, memory within 10% on CPU (traced).
    errors = json.loads((out / "prediction_error.json").read_text())
    gpt2_errors = [r for r in errors if r["workload"] == "gpt2"]
    assert len(gpt2_errors) == 7 and all(r["predicted_step_s"] and r["measured_step_s"] for r in gpt2_errors)
    assert all(abs(r["memory_error"]) <= 0.10 for r in gpt2_errors), gpt2_errors

    # Energy: the counter's source and figures reached the database (0 J: the counter stood still).
    sources = {json.loads(raw)["energy"]["source"] for (raw,) in db.execute("SELECT raw FROM metrics")}
    assert sources == {"rapl"}
    energy = db.execute("SELECT COUNT(*), MAX(value) FROM metric_values WHERE name = 'energy_j'").fetchone()
    assert energy == (len(rows), 0.0)

    summary = (out / "summary.md").read_text()
    for workload in WORKLOADS:
        assert f"| {workload} |" in summary, workload
    assert "zero2 +ckpt" in summary and "fsdp-full +ckpt" in summary
    assert "precision fp8 not supported" in summary
    assert "| rapl |" in summary
    # Each figure beside its limit (the profile's peak, MFU; the bandwidth, MBU: `local` states
    # neither, so "-"), and the reference loop.
    assert "| figures | limit | of limit |" in summary and "Reference loop (64^3 fp32 on cpu)" in summary
    assert "tiny 1 plain" in summary and "tiny 4 static" in summary
    assert summary in proc.stdout  # printed as well as written
    assert "prediction_error" in proc.stdout and "calibrate" in proc.stdout


def test_the_gpu_check_plans_on_both_systems(tmp_path: Path) -> None:
    """The GPU sweep itself (its sizes, not the tiny ones) plans on gpu-box's h100 and h200: every
    run runnable, fp8 included, each gpt2 run with a traced memory and a time prediction. Keeps the
    check that no GPU has run yet from rotting (a renamed parameter, a size that stopped fitting)."""
    from benchmarks.device_check import GPU, sweep_document

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update({"ORCH_HOME": str(tmp_path / "state"), "ORCH_MEMORY_CACHE": str(tmp_path / "memcache")})
    for system in ("h100", "h200"):
        sweep = tmp_path / f"{system}.yaml"
        sweep.write_text(json.dumps(sweep_document(GPU, f"gpu-box:{system}")))  # JSON is YAML
        proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "plan", "--dry-run", "--json", str(sweep)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs = json.loads(proc.stdout)["runs"]
        assert len(runs) == 21 and all(r["status"] == "planned" for r in runs), [r["reason"] for r in runs]
        assert {r["precision"] for r in runs if r["workload"] == "gemm"} == set(GPU.gemm_precisions)
        gpt2 = [r for r in runs if r["workload"] == "gpt2"]
        assert len(gpt2) == 13 and all(r["mem_from"].startswith("trace") and r["step_s"] for r in gpt2), gpt2
        # The compiled and eager pairs, gpt2-xl under every strategy (issue 50's round 2).
        assert sum("compile=True" in r["params"].split() for r in gpt2) == 2
        assert {r["experiment"] for r in gpt2 if "gpt2-xl" in r["params"]} >= {"gpt2-strategies", "gpt2-compiled"}
        assert max(r["mem_gb"] for r in gpt2) < 80  # gpt2-xl under ddp fits the H100's 80 GB
