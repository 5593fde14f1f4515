"""A benchmark run on part of an accelerator node asks for the whole node unless the sweep says share: true."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write

SWEEP = """\
name: excl
experiments:
  - name: alone
    workload: gemm
    sites: [stanage, sophia, polaris]
    walltime: "00:10:00"
    grid: {{devices: [1, {full}], m: 256}}
  - name: shared
    workload: gemm
    sites: [stanage, sophia, polaris]
    walltime: "00:10:00"
    share: true
    grid: {{devices: 1, m: 512}}
"""


def test_partial_node_runs_are_exclusive_unless_shared(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", SWEEP.format(full=2))
    out = json.loads(run_orch("plan", str(sweep), "--show", "--json", cwd=workdir,
                              env={"ORCH_ACCOUNT": "proj"}, check=True).stdout)
    seen = set()
    for row in out["runs"]:
        if row.get("skipped") or row["run_id"] not in out["scripts"]:
            continue
        script = out["scripts"][row["run_id"]]
        site = row["site"].partition(":")[0]
        slurm = site == "stanage"
        exclusive = ("#SBATCH --exclusive\n" in script) if slurm else ("excl\n" in script.split("#PBS -l place=")[-1]
                                                                        if "#PBS -l place=" in script else False)
        per_node = {"stanage": 2, "sophia": 8, "polaris": 4}[site]
        partial = row["devices"] < per_node
        expected = partial and row["experiment"] == "alone"
        assert exclusive == expected, (site, row["experiment"], row["devices"], script)
        seen.add((site, row["experiment"], partial))
    # Each site had a partial-node run with and without share, and stanage a full-node one.
    assert {("stanage", "alone", True), ("stanage", "shared", True), ("stanage", "alone", False),
            ("sophia", "alone", True), ("sophia", "shared", True),
            ("polaris", "alone", True), ("polaris", "shared", True)} <= seen


def test_a_queue_for_partial_nodes_is_not_asked_for_a_whole_node(workdir: Path) -> None:
    # JADE2's `small` partition takes one GPU a job on shared nodes: --exclusive there would pend
    # for ever (QOSMaxGRESPerJob on its twin). Its `big` partition takes whole nodes.
    sweep = write(workdir / "j.yaml", "name: j\nexperiments:\n  - name: one\n    workload: gemm\n"
                                      "    sites: [jade2]\n    grid: {devices: [1, 4], m: 256}\n")
    out = json.loads(run_orch("plan", str(sweep), "--show", "--json", cwd=workdir,
                              env={"ORCH_ACCOUNT": "proj", "ORCH_JADE2_VENV": "/jmain02/home/u/venv"},
                              check=True).stdout)  # JADE2's Python is the user's (sites/jade2.yaml python_env)
    by_devices = {row["devices"]: out["scripts"][row["run_id"]] for row in out["runs"]}
    assert "#SBATCH --partition=small" in by_devices[1] and "--exclusive" not in by_devices[1]
    assert "#SBATCH --partition=big" in by_devices[4] and "#SBATCH --exclusive\n" in by_devices[4]
