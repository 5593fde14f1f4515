"""`orch run` on a PBS site, end to end: real CLI, the PBS emulator on PATH, real torch, SQLite."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import run_orch, write

SITE = """\
# A PBS Pro site on this machine (the emulator): CPU processes as devices.
name: pbstest
description: PBS emulator on this machine.
scheduler: pbs
max_nodes: 1
device:
  type: cpu
  model: host-cpu
  per_node: 2
  precisions: [fp32, bf16]
resources:
  place: free
queues:
  - name: workq
    max_nodes: 1
    max_walltime: "00:20:00"
launcher:
  name: torchrun
account:
  env: PBSTEST_PROJECT
"""

SWEEP = """\
name: pbs-e2e
experiments:
  - name: gemm
    workload: gemm
    sites: [pbstest]
    walltime: "00:05:00"
    grid:
      devices: [1, 2]
      precision: [fp32, bf16]
      m: 96
      n: 96
      k: 96
      warmup: 1
      iters: 3
"""


def test_orch_run_on_pbs_with_arrays(pbs, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    sites = tmp_path / "sites"
    write(sites / "pbstest.yaml", SITE)
    sweep = write(workdir / "sweep.yaml", SWEEP)
    env = {"PBSTEST_PROJECT": "proj42"}
    proc = run_orch("--sites-dir", str(sites), "run", str(sweep), "--interval", "0.5", cwd=workdir, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    rows = json.loads(run_orch("sql", "-f", "json", "SELECT devices, precision, status, tflops, job_id, node_list "
                               "FROM results ORDER BY devices, precision", cwd=workdir, check=True).stdout)
    assert [(r["devices"], r["precision"], r["status"]) for r in rows] == [
        (1, "bf16", "completed"), (1, "fp32", "completed"), (2, "bf16", "completed"), (2, "fp32", "completed")]
    assert all(r["tflops"] > 0 and r["node_list"] for r in rows)
    # Same-shape runs went in job arrays: ids <seq>[i].<server>.
    assert all(re.fullmatch(r"\d+\[[01]\]\.pbs01", r["job_id"]) for r in rows)
    qsubs = pbs.calls("qsub")
    assert len(qsubs) == 2 and all(c[c.index("-J") + 1] == "0-1" for c in qsubs)
    # Following: every poll is one qstat naming every array once.
    assert all(c[1:6] == ["-x", "-t", "-f", "-F", "json"] and len(c) <= 8 for c in pbs.calls("qstat"))
    # The rendered script is a PBS script with the site's directives, the account from the env.
    script = run_orch("sql", "-f", "json", "SELECT script, queue FROM runs LIMIT 1", cwd=workdir, check=True).stdout
    text = json.loads(script)[0]["script"]
    assert json.loads(script)[0]["queue"] == "workq"
    assert "#PBS -l select=1\n" in text and "#PBS -q workq\n" in text and "#PBS -A proj42\n" in text
    assert "#PBS -l place=free\n" in text and "#PBS -l walltime=00:05:00\n" in text

    # Running the sweep again submits nothing new.
    again = run_orch("--sites-dir", str(sites), "run", str(sweep), "--json", cwd=workdir, env=env, check=True)
    assert len(json.loads(again.stdout)) == 4 and len(pbs.calls("qsub")) == 2
