"""orch's Slurm executor against the REAL sandbox cluster (slurmctld, 4 slurmd, slurmdbd).

Tests run in file order: the cluster checks first (nodes still idle), then the
``jobs`` fixture submits every slow job at once (walltime, memory, multi-node, ...)
so that they run side by side while the quicker tests go on; the walltime test,
the slowest, is last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.run.executors.base import FailureClass, JobInfo, JobRequest, JobState
from orchestrator.run.executors.slurm import SlurmExecutor
from orchestrator.sites import sandbox
from tests.slurm.conftest import up_again

pytestmark = pytest.mark.slurm


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30).stdout


# --------------------------------------------------------------------------------------
# The cluster itself
# --------------------------------------------------------------------------------------


def test_up_is_idempotent_and_cluster_answers(cluster):
    st = up_again()  # no restart, nothing rewritten
    assert st.ok, st.problems
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
def jobs(cluster, slurm_root, new_request):
    """Submit the slow and failing jobs together; tests pick theirs by key.

    Returns (executor, {key: job id}, {key: JobRequest}).
    """
    root = slurm_root / "failures"
    tag = uuid.uuid4().hex[:8]
    reqs = {
        "timeout": new_request(root, f"timeout-{tag}", "sleep 600", ["--time=00:01:00"]),
        "oom": new_request(root, f"oom-{tag}", OOM_BODY, ["--mem=100M", "--time=00:03:00"]),
        "exit3": new_request(root, f"exit3-{tag}", "echo failing; exit 3", ["--time=00:02:00"]),
        "cancel": new_request(root, f"cancel-{tag}", "sleep 300", ["--time=00:10:00"]),
        "badout": None,
        "multinode": new_request(
            root, f"mn-{tag}", "", ["-N 2 --ntasks-per-node=2", "--time=00:05:00", "--gres=gpu:2"],
            nodes=2, tasks_per_node=2),
    }
    # A script whose --output directory does not exist cannot even start.
    bad = new_request(root, f"badout-{tag}", "echo never", ["--time=00:01:00"])
    bad.script_path.write_text(bad.script_path.read_text().replace(
        f"--output={bad.run_dir}/slurm-%j.out", "--output=/nonexistent/orch/slurm-%j.out"))
    reqs["badout"] = bad
    mn = reqs["multinode"]
    (mn.run_dir / "allreduce.py").write_text(ALLREDUCE)
    mn.script_path.write_text(mn.script_path.read_text() + MULTINODE_BODY.format(
        python=sys.executable, run_dir=mn.run_dir))

    ex = SlurmExecutor(root / "sched")
    keys = list(reqs)
    result = ex.submit([reqs[k] for k in keys])
    ids = result.job_ids
    assert all(ids), result.refused
    assert ex.calls["sbatch"] == len(keys)  # empty shape keys: one job each, no arrays
    yield ex, dict(zip(keys, ids)), reqs
    # A failed or interrupted run must not leave sleepers on the cluster.
    ex.cancel([i for i in ids if i])


def test_array_of_five_runs_each_own_script(cluster, jobs, slurm_root, new_request, follow):
    root = slurm_root / "array"
    tag = uuid.uuid4().hex[:8]
    reqs = [
        new_request(root, f"arr{i}-{tag}",
                    f"echo hi {i} $SLURM_ARRAY_TASK_ID > {root}/arr{i}-{tag}/out\npwd > {root}/arr{i}-{tag}/cwd",
                    ["--time=00:02:00", "--ntasks=1"], shape_key="tiny")
        for i in range(5)
    ]
    ex = SlurmExecutor(root / "sched", {"array_parallelism": 2})
    ids = list(ex.submit(reqs).job_ids)
    assert ex.calls == {"sbatch": 1}
    base = ids[0].split("_")[0]
    assert ids == [f"{base}_{i}" for i in range(5)]
    submission = (root / "sched" / "submitit" / f"{base}_submission.sh").read_text()
    assert "#SBATCH --array=0-4%2" in submission

    before = dict(ex.calls)
    infos = follow(ex, ids, timeout=90)
    polls = ex.calls.get("sacct", 0) - before.get("sacct", 0)
    assert polls >= 1
    for i, (jid, req) in enumerate(zip(ids, reqs)):
        info = infos[jid]
        assert info.state == JobState.COMPLETED, info
        assert info.exit_code == 0
        assert info.node_list and info.node_list.startswith("n")
        assert info.elapsed_s is not None and info.finished_at
        # each task ran ITS script, in its run directory, with its own --output
        assert (req.run_dir / "out").read_text().split() == ["hi", str(i), str(i)]
        assert (req.run_dir / "cwd").read_text().strip() == str(req.run_dir)
        assert list(req.run_dir.glob(f"slurm-{base}_{i}.out")) or list(req.run_dir.glob("slurm-*.out"))

    # repair after an interrupted submit: names -> ids, one sacct call
    calls_before = ex.calls.get("sacct", 0)
    found = ex.find_by_name([r.job_name for r in reqs] + [f"orch-never-{tag}-a1"])
    assert found == {r.job_name: jid for r, jid in zip(reqs, ids)}
    assert ex.calls["sacct"] == calls_before + 1


def test_a_name_in_two_array_manifests_finds_the_array_slurm_has(cluster, slurm_root, new_request):
    """An array whose sbatch never reached Slurm left its manifest; its runs then went in a smaller
    array that did. Repair finds each run's job in the array Slurm knows, whichever manifest the
    folder lists first (the stale one is made to sort last)."""
    root = slurm_root / "twomanifests"
    tag = uuid.uuid4().hex[:8]
    reqs = [new_request(root, f"two{i}-{tag}", "true", ["--time=00:01:00"], shape_key="s") for i in range(2)]
    ex = SlurmExecutor(root / "sched")
    result = ex.submit(reqs)
    ids = result.job_ids
    assert all(ids), result.refused
    stale = root / "sched" / "arrays" / "ffffffffffffffff.names"
    stale.write_text("\n".join([f"orch-gone-{tag}-a1", *(r.job_name for r in reversed(reqs))]) + "\n")
    want = dict(zip([r.job_name for r in reqs], ids))
    deadline = time.monotonic() + 20
    while True:  # a just-submitted array can miss one answer (accounting lag); never a wrong id
        found = SlurmExecutor(root / "sched").find_by_name([r.job_name for r in reqs])
        assert all(want[name] == jid for name, jid in found.items()), (found, want)
        if found == want or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert found == want


def test_find_by_name_raises_when_slurm_cannot_be_asked(cluster, slurm_root, new_request, tmp_path, monkeypatch):
    """"Not found" hands a run back to be submitted again: it must mean Slurm was asked and does not
    know the job. A failed sacct, or a failed squeue for names sacct lacks, raises instead."""
    from orchestrator.run.executors.slurm import SlurmError

    ex = SlurmExecutor(slurm_root / "raise" / "sched")
    (tmp_path / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Problem talking to the database' >&2\nexit 1\n")
    (tmp_path / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Socket timed out' >&2\nexit 1\n")
    for stub in ("sacct", "squeue"):
        (tmp_path / stub).chmod(0o755)
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", f"{tmp_path}:{path}")
    with pytest.raises(SlurmError, match="sacct could not say.*Problem talking to the database"):
        ex.find_by_name(["orch-nobody-a1"])
    (tmp_path / "sacct").unlink()  # sacct answers (it does not know the name); squeue still fails
    with pytest.raises(SlurmError, match="squeue could not say.*Socket timed out"):
        ex.find_by_name(["orch-nobody-a1"])
    monkeypatch.setenv("PATH", path)
    assert ex.find_by_name(["orch-nobody-a1"]) == {}  # asked, and unknown: the only "not found"


def test_max_array_size_splits_and_max_queued_jobs_limits(cluster: object, jobs: object, slurm_root: Path,
                                                          new_request: Callable[..., JobRequest],
                                                          follow: Callable[..., dict[str, JobInfo]]) -> None:
    root = slurm_root / "split"
    tag = uuid.uuid4().hex[:8]
    reqs = [new_request(root, f"split{i}-{tag}", "true", ["--time=00:01:00"], shape_key="s")
            for i in range(3)]
    ex = SlurmExecutor(root / "sched", {"max_array_size": 2})
    result = ex.submit(reqs)
    ids = [i for i in result.job_ids if i is not None]
    assert len(ids) == len(reqs), result
    assert ex.calls["sbatch"] == 2
    assert ids[0].endswith("_0") and ids[1].endswith("_1") and ids[0].split("_")[0] == ids[1].split("_")[0]
    assert "_" not in ids[2]  # the remainder of one is a plain job
    infos = follow(ex, ids, timeout=90)
    assert all(i.state == JobState.COMPLETED for i in infos.values()), infos

    # max_queued_jobs: only the headroom left under the limit is submitted, first come first
    lim_reqs = [new_request(root, f"lim{i}-{tag}", "true", ["--time=00:01:00"]) for i in range(4)]
    ex2 = SlurmExecutor(root / "sched2", {"max_queued_jobs": 0})
    seen: list[int] = []
    real = ex2.queued_count

    def counted_queued_count() -> int:
        seen.append(real())
        return seen[-1]

    ex2.queued_count = counted_queued_count  # type: ignore[method-assign]
    ex2.options.max_queued_jobs = real() + 2  # typed options (SlurmOptions)
    result2 = ex2.submit(lim_reqs)
    ids2 = result2.job_ids
    k = max(0, min(4, ex2.options.max_queued_jobs - seen[0]))
    assert [i is not None for i in ids2] == [True] * k + [False] * (4 - k)
    assert set(result2.deferred) == {r.job_name for r in lim_reqs[k:]}
    assert all("max_queued_jobs" in v for v in result2.deferred.values()) and not result2.refused
    follow(ex2, [i for i in ids2 if i], timeout=90)


def test_rejected_script_is_reported_and_the_rest_submitted(cluster, jobs, slurm_root, new_request, follow):
    root = slurm_root / "rejected"
    tag = uuid.uuid4().hex[:8]
    bad = new_request(root, f"toolong-{tag}", "true", ["--partition=debug", "--time=02:00:00"])  # debug: 1 h max
    huge = new_request(root, f"huge-{tag}", "true", ["-N 5"])  # 4 nodes exist
    good = new_request(root, f"fine-{tag}", "true", ["--partition=batch", "--time=02:00:00"])
    ex = SlurmExecutor(root / "sched")
    result = ex.submit([bad, huge, good])
    ids = result.job_ids
    assert ids[0] is None and ids[1] is None and ids[2]
    assert "time limit" in result.refused[bad.job_name].lower()
    assert "node count" in result.refused[huge.job_name].lower()
    assert not result.deferred
    assert follow(ex, [ids[2]], timeout=60)[ids[2]].state == JobState.COMPLETED


def test_exit_code_3_is_failed_with_code(jobs, follow):
    ex, ids, _ = jobs
    info = follow(ex, [ids["exit3"]], timeout=90)[ids["exit3"]]
    assert info.state == JobState.FAILED
    assert info.failure == FailureClass.FAILED
    assert info.exit_code == 3


def test_unstartable_script_is_launch_error(jobs, follow):
    ex, ids, _ = jobs
    info = follow(ex, [ids["badout"]], timeout=90)[ids["badout"]]
    assert info.state == JobState.FAILED
    assert info.failure == FailureClass.LAUNCH_ERROR, info


def test_over_memory_is_out_of_memory(cluster, jobs, follow):
    ex, ids, reqs = jobs
    info = follow(ex, [ids["oom"]], timeout=120)[ids["oom"]]
    assert info.state == JobState.FAILED
    if cluster.memory_enforcement == "cgroup":
        assert info.failure == FailureClass.OUT_OF_MEMORY, info
    else:
        # Without cgroups slurmstepd kills the step (SIGKILL) and sacct says FAILED 0:9.
        assert info.failure in (FailureClass.OUT_OF_MEMORY, FailureClass.FAILED), info
        assert info.extra.get("signal") == 9
    out = next(reqs["oom"].run_dir.glob("slurm-*.out")).read_text()
    assert "still alive" not in out.splitlines()  # (bash echoes the killed command's text)


def test_scancel_is_cancelled(jobs, reach, follow):
    ex, ids, _ = jobs
    jid = ids["cancel"]
    reach(ex, jid, {"running"}, timeout=90)
    before = ex.calls.get("scancel", 0)
    ex.cancel([jid])
    assert ex.calls["scancel"] == before + 1
    info = follow(ex, [jid], timeout=60)[jid]
    assert info.state == JobState.FAILED
    assert info.failure == FailureClass.CANCELLED
    ex.cancel([jid])  # cancelling an ended job is harmless


def test_find_by_name_single_job(jobs):
    ex, ids, reqs = jobs
    found = ex.find_by_name([reqs["exit3"].job_name, reqs["cancel"].job_name])
    assert found == {reqs["exit3"].job_name: ids["exit3"], reqs["cancel"].job_name: ids["cancel"]}
    comment = sh("sacct", "-X", "-n", "-P", "-o", "Comment", "-j", ids["exit3"]).strip()
    assert comment == f"orch run={reqs['exit3'].run_id} attempt=1"


def test_multinode_srun_torch_gloo_allreduce(jobs, follow):
    ex, ids, reqs = jobs
    jid = ids["multinode"]
    info = follow(ex, [jid], timeout=180)[jid]
    run_dir = reqs["multinode"].run_dir
    log = "\n".join(p.read_text() for p in run_dir.glob("slurm-*.out"))
    assert info.state == JobState.COMPLETED, f"{info}\n{log}"
    assert info.node_list == "n[1-2]" or info.node_list.count("n") >= 1
    ranks = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(4)]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["nnodes"] == 2 for r in ranks)
    assert all(r["sum"] == 10.0 for r in ranks)  # 1+2+3+4 summed across both nodes
    assert len({r["node"] for r in ranks}) == 2
    assert sorted(r["local"] for r in ranks) == [0, 0, 1, 1]


def test_restart_controller_while_following(cluster, slurm_root, new_request, follow):
    root = slurm_root / "restart"
    tag = uuid.uuid4().hex[:8]
    reqs = [new_request(root, f"rs{i}-{tag}", "sleep 8; echo done", ["--time=00:02:00"]) for i in range(2)]
    ex = SlurmExecutor(root / "sched")
    ids = ex.submit(reqs).job_ids
    assert all(ids)
    ex.query(ids)
    sandbox.restart_controller()
    infos = follow(ex, ids, timeout=120)
    for jid in ids:
        assert infos[jid].state == JobState.COMPLETED, infos[jid]
    assert sandbox.status().ok


def test_over_walltime_is_timeout(jobs, follow):
    ex, ids, _ = jobs
    info = follow(ex, [ids["timeout"]], timeout=150)[ids["timeout"]]
    assert info.state == JobState.FAILED
    assert info.failure == FailureClass.TIMEOUT, info
    assert info.elapsed_s is not None and 55 <= info.elapsed_s <= 130
