"""Issue 53, part B: tracebacks, hangs and memory under hostile input, and what real use found
(the cost of a shared node, runs that cannot start, the report's ranking, messages)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write

ACCOUNT = {"ORCH_ACCOUNT": "proj", "ORCH_QOS": "q"}


def test_a_run_on_a_share_of_a_node_is_charged_its_own_devices(workdir: Path) -> None:
    # Issue 53 real use 6: Baskerville's scripts ask `--gpus-per-node=1 --cpus-per-gpu=36`, not the
    # whole node, yet the 1-GPU run was charged 4 GPUs.
    sweep = write(workdir / "c.yaml", "name: c\nexperiments:\n  - name: one\n    workload: gemm\n"
                                      "    sites: [baskerville, stanage]\n    grid: {devices: [1, 2], m: 256}\n")
    out = json.loads(run_orch("plan", str(sweep), "--show", "--json", cwd=workdir, env=ACCOUNT,
                              check=True).stdout)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT id AS run_id, site, devices, charged_devices FROM runs",
                               cwd=workdir, check=True).stdout)
    seen = set()
    for row in rows:
        script = out["scripts"][row["run_id"]]
        exclusive = "#SBATCH --exclusive\n" in script
        site = row["site"].partition(":")[0]
        expected = {"baskerville": 4, "stanage": 2}[site] if exclusive else row["devices"]
        assert row["charged_devices"] == expected, (row, script)
        seen.add((site, row["devices"], exclusive))
    # Baskerville's partial-node run shares its node; stanage's holds it whole.
    assert {("baskerville", 1, False), ("stanage", 1, True)} <= seen
