"""orch's Slurm executor against the REAL sandbox cluster (slurmctld, 4 slurmd, slurmdbd).

Tests run in file order: the cluster checks first (nodes still idle), then the
``jobs`` fixture submits every slow job at once (walltime, memory, multi-node, ...)
so that they run side by side while the quicker tests go on; the walltime test,
the slowest, is last.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest

from orchestrator import sandbox
from orchestrator.executors.base import FailureClass, JobState
from orchestrator.executors.slurm import SlurmExecutor

pytestmark = pytest.mark.slurm


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30).stdout


# --------------------------------------------------------------------------------------
# The cluster itself
# --------------------------------------------------------------------------------------


def test_up_is_idempotent_and_cluster_answers(cluster):
    t0 = time.monotonic()
    st = sandbox.up()
    took = time.monotonic() - t0
    assert st.ok, st.problems
    assert took < 5, f"second up() took {took:.1f}s"
    assert sandbox.up().as_dict()["nodes"].keys() == st.nodes.keys()

    lines = sh("sinfo", "-N", "-h", "-o", "%N|%T|%G|%P").split()
    nodes = {}
    for ln in lines:
        name, state, gres, part = ln.split("|")
        nodes.setdefault(name, (state, gres))
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    busy = sh("squeue", "-h", "-o", "%i").strip()
    for name, (state, gres) in nodes.items():
        assert gres == "gpu:4", (name, gres)
        if not busy:
            assert state == "idle", (name, state)
        else:
            assert state in ("idle", "mixed", "allocated", "completing"), (name, state)
    assert {"debug", "batch"} <= set(st.partitions)
    assert st.default_partition == "debug"
    assert st.gres == {n: "gpu:4" for n in ("n1", "n2", "n3", "n4")}
    assert st.sacct_ok
    out = subprocess.run(["sacct", "--parsable2", "-X", "-o", "JobID,State", "-S", "now-1hours"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("JobID|State")
    cfg = sh("scontrol", "show", "config")
    assert "MaxArraySize            = 1001" in cfg
    assert "AccountingStorageType   = accounting_storage/slurmdbd" in cfg


def test_status_reports_without_changing(cluster):
    before = sandbox.SLURM_CONF.stat().st_mtime
    st = sandbox.status()
    assert st.ok
    assert st.munge and st.slurmdbd and st.slurmctld and all(st.slurmd.values())
    assert st.config_dir == "/etc/slurm"
    assert sandbox.SLURM_CONF.stat().st_mtime == before


# --------------------------------------------------------------------------------------
# Every slow job, submitted at once
# --------------------------------------------------------------------------------------

ALLREDUCE = r'''
import json, os, sys
from datetime import timedelta
import torch
import torch.distributed as dist

rank = int(os.environ["SLURM_PROCID"])
world = int(os.environ["SLURM_NTASKS"])
local = int(os.environ["SLURM_LOCALID"])
dist.init_process_group(
    "gloo",
    init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
    rank=rank, world_size=world, timeout=timedelta(seconds=120),
)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
out = {"rank": rank, "world": world, "local": local, "sum": t.item(),
       "node": os.environ.get("SLURMD_NODENAME"), "nodelist": os.environ["SLURM_JOB_NODELIST"],
       "nnodes": int(os.environ["SLURM_JOB_NUM_NODES"])}
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
'''

MULTINODE_BODY = """
set -euo pipefail
MASTER_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR=$(scontrol show node "$MASTER_NODE" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export GLOO_SOCKET_IFNAME=lo
echo "master $MASTER_NODE at $MASTER_ADDR:$MASTER_PORT"
srun {python} {run_dir}/allreduce.py {run_dir}
"""

OOM_BODY = f"""
{sys.executable} - <<'PY'
import time
b = bytearray(600 * 1024 * 1024)
for i in range(0, len(b), 4096):
    b[i] = 1
print("allocated 600 MB", flush=True)
time.sleep(60)
print("still alive")
PY
"""


@pytest.fixture(scope="module")
def jobs(cluster, slurm_root):
    """Submit the slow and failing jobs together; tests pick theirs by key."""
    from tests_slurm_support import make_request  # noqa: F401  (replaced below)


def _submit_all(root):
    from conftest_helpers import make_request  # pragma: no cover
