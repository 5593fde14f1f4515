"""`orch plan` skips, with the program's own reason, runs the workload would refuse at start
(issue 16: values that plan accepted but the launch rejected): no job is submitted that can
only fail, and nothing is traced for it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write

SWEEP = """\
name: refusals
experiments:
  - name: g
    workload: gpt2
    sites: [local]
    walltime: "00:05:00"
    grid: {model: tiny, devices: [1, 2], seq_len: 64, block_size: [0, 32], tp: [1, 2], vocab_size: 256}
"""


def test_runs_the_program_would_refuse_are_skipped_with_its_reason(tmp_path: Path) -> None:
    sweep = write(tmp_path / "s.yaml", SWEEP)
    runs = json.loads(run_orch("plan", str(sweep), "--dry-run", "--json", cwd=tmp_path, check=True).stdout)["runs"]

    def key(run: dict) -> tuple[int, int, int]:
        params = dict(item.split("=", 1) for item in run["params"].split())  # "block_size=0 model=tiny ..."
        return run["devices"], int(params["block_size"]), int(params["tp"])

    by = {key(r): r for r in runs}
    assert len(by) == 8
    for (devices, block, tp), run in by.items():
        refused = block == 32 or tp > devices
        assert (run["status"] == "skipped") == refused, run
        if block == 32:
            assert "seq_len 64 exceeds block_size 32" in run["reason"]
        elif tp > devices:
            assert run["reason"].startswith("gpt2 refuses these values:") and "rank" in run["reason"]
    # tp 2 on 2 ranks is a layout the program runs: planned, with its predictions.
    assert by[(2, 0, 2)]["status"] == "planned" and by[(2, 0, 2)]["mem_gb"]


def test_a_local_run_sized_past_this_machines_memory_is_skipped_at_plan(tmp_path: Path) -> None:
    # Issue 27: it was traced, launched, swapped and killed by the kernel minutes later.
    from orchestrator.plan.resolve import host_memory_gb

    host = host_memory_gb()
    assert host is not None  # /proc/meminfo on Linux
    sweep = write(tmp_path / "s.yaml", "name: big\nexperiments:\n  - name: g\n    workload: gpt2\n    sites: [local]\n"
                                       "    walltime: 10\n    grid: {model: [tiny, mpt-30b], batch_size: 1, "
                                       "seq_len: 64, precision: fp32}\n")
    runs = json.loads(run_orch("plan", str(sweep), "--dry-run", "--json", cwd=tmp_path, check=True).stdout)["runs"]
    by_model = {r["params"].split("model=")[1].split()[0]: r for r in runs}
    assert by_model["tiny"]["status"] == "planned"
    big = by_model["mpt-30b"]
    assert big["status"] == "skipped" and big["mem_gb"] > host
    # mem_gb is rounded to 3 significant figures in the plan's table; the reason keeps one decimal.
    # Batch 1 on one process: nothing smaller is there to suggest (issue 27: a skip says what would fit).
    assert big["reason"].startswith("predicted to need ") and big["reason"].endswith(
        f" GB tensors by {big['mem_from']}), this machine has {host:.1f} GB; nothing smaller fits (no smaller "
        "micro-batch nor a sharded strategy)")
    needed = float(big["reason"].split()[3])
    assert abs(needed - big["mem_gb"]) <= 0.01 * big["mem_gb"] and "of host memory (1 process(es) x" in big["reason"]


def test_a_missing_account_is_said_before_any_memory_trace(tmp_path: Path) -> None:
    # Issue 27: cheap checks (the account) ran after seconds of tracing the runs' memory.
    sweep = write(tmp_path / "s.yaml", "name: acct\nexperiments:\n  - name: g\n    workload: gpt2\n"
                                       "    sites: [polaris]\n    walltime: 600\n"
                                       "    grid: {model: [tiny, gpt2], devices: [1, 4], batch_size: 1, seq_len: 64}\n")
    env = {"ORCH_MEMORY_CACHE": str(tmp_path / "empty-cache")}  # every shape would need a trace
    proc = run_orch("plan", str(sweep), "--dry-run", "--json", cwd=tmp_path, env=env, check=True)
    runs = json.loads(proc.stdout)["runs"]
    assert {r["status"] for r in runs} == {"skipped"} and len(runs) == 4
    assert all(r["reason"].startswith("site polaris needs an account/project: set $") for r in runs)
    assert "tracing" not in proc.stderr and not (tmp_path / "empty-cache").exists()
