"""Launchers (argv per registered class) and the launch helpers the templates write, run for real
with stand-in scheduler commands (mpiexec, srun, scontrol, module, conda) that record what they got."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.plan.expand import RunSpec
from orchestrator.plan.render import RunFiles, render_script
from orchestrator.plan.resolve import resolve
from orchestrator.sites.launchers import LAUNCHERS, LaunchRequest, get_launcher
from orchestrator.sites.profiles import SiteProfile, load_site


def req(**kw: Any) -> LaunchRequest:
    base: dict[str, Any] = dict(python="py", module="workloads.gemm", args=["--x", "1"], nodes=1, tasks_per_node=4,
                                extra_args=[], scheduler="slurm", devices_per_node=4, workload="gemm",
                                script="/w/workloads/gemm.py")
    base.update(kw)
    return LaunchRequest(**base)


def test_registry_has_every_launcher() -> None:
    # Vendor runners (orchestrator/sites/vendors/, tested in tests/vendors/) are imported before a lookup.
    assert {"python", "single", "torchrun", "srun", "mpiexec", "mpirun", "deepspeed", "gaudi_spawn", "sambaflow",
            "cerebras", "poptorch", "groqflow"} <= set(LAUNCHERS.names())
    assert get_launcher("sambaflow").name == "sambaflow" and get_launcher("cerebras").name == "cerebras"
    with pytest.raises(KeyError, match="unknown launcher 'nope'"):
        get_launcher("nope")


@pytest.mark.parametrize("name, kw, argv", [
    ("python", dict(tasks_per_node=1), ["py", "-m", "workloads.gemm", "--x", "1"]),
    ("srun", dict(nodes=2), ["srun", "--nodes=2", "--ntasks-per-node=4", "--ntasks=8", "py", "-m", "workloads.gemm",
                             "--x", "1"]),
    ("mpiexec", dict(nodes=2, extra_args=["--depth", "16"], rank_wrapper=["bash", "w.sh"]),
     ["mpiexec", "-n", "8", "--ppn", "4", "--depth", "16", "bash", "w.sh", "py", "-m", "workloads.gemm", "--x", "1"]),
    ("mpirun", dict(tasks_per_node=8, devices_per_node=8),
     ["mpirun", "-n", "8", "-ppn", "8", "py", "-m", "workloads.gemm", "--x", "1"]),
    ("torchrun", dict(), ["py", "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=4",
                          "-m", "workloads.gemm", "--x", "1"]),
    ("torchrun", dict(nodes=2), ["srun", "--nodes=2", "--ntasks-per-node=1", "--ntasks=2", "py", "-m",
                                 "torch.distributed.run", "--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                                 "-m", "workloads.gemm", "--x", "1"]),
    ("torchrun", dict(nodes=3, scheduler="pbs"), ["mpiexec", "-n", "3", "--ppn", "1", "py", "-m",
                                                  "torch.distributed.run", "--nnodes=3", "--nproc-per-node=4",
                                                  "--rdzv-backend=c10d", "-m", "workloads.gemm", "--x", "1"]),
    ("deepspeed", dict(), ["deepspeed", "--num_nodes=1", "--num_gpus=4", "--no_local_rank", "--module",
                           "workloads.gemm", "--x", "1"]),
    ("deepspeed", dict(nodes=2, scheduler="pbs"),
     ["deepspeed", "--num_nodes=2", "--num_gpus=4", "--hostfile=orch-hostfile", "--launcher=mpich",
      "--master_port=29500", "--no_local_rank", "--module", "workloads.gemm", "--x", "1"]),
    ("gaudi_spawn", dict(tasks_per_node=8, options={"program": "/m/gaudi_spawn.py", "mode": "deepspeed"}),
     ["py", "/m/gaudi_spawn.py", "--world_size", "8", "--use_deepspeed", "/w/workloads/gemm.py", "--x", "1"]),
    ("single", dict(tasks_per_node=1, options={"via": "srun"}),
     ["srun", "--nodes=1", "--ntasks=1", "py", "-m", "workloads.gemm", "--x", "1"]),
])
def test_argv(name: str, kw: dict, argv: list[str]) -> None:
    launcher = get_launcher(name)
    request = req(**kw)
    assert launcher.check(request) is None
    assert launcher.argv(request) == argv


def refusal(name: str, request: LaunchRequest) -> str:
    """Why a launcher the test expects to refuse the request refuses it."""
    reason = get_launcher(name).check(request)
    assert reason is not None, (name, request)
    return reason


def test_checks_say_why() -> None:
    assert "starts one process, run needs 4" in refusal("python", req())
    assert "needs srun or mpiexec" in refusal("torchrun", req(nodes=2, scheduler="local"))
    assert "at most 1 node(s)" in refusal("gaudi_spawn", req(nodes=2))


# ------------------------------------------------------------------------------ running the helpers


def spec(site: str, devices: int) -> RunSpec:
    return RunSpec(sweep="s", experiment="e", workload="gemm", site=site, system=None, devices=devices,
                   precision="bf16", strategy=None, batch_size=None, seq_len=None, repeat=0, params=(("m", 64),),
                   walltime_s=600)


RECORDER = """#!/usr/bin/env python3
import json, os, sys
keep = ("CUDA_VISIBLE_DEVICES", "PMI_LOCAL_RANK", "PET_RDZV_ENDPOINT", "PET_RDZV_ID", "MASTER_ADDR", "PWD")
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({"prog": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                        "env": {k: os.environ.get(k) for k in keep}}) + "\\n")
"""

FAKE_MPIEXEC = """#!/bin/bash
# mpiexec -n N --ppn K [flags] PROGRAM...: run PROGRAM once per local rank of one node
ppn=1
while [ $# -gt 0 ]; do
  case "$1" in
    -n) shift 2;;
    --ppn) ppn=$2; shift 2;;
    --depth|--cpu-bind) shift 2;;
    *) break;;
  esac
done
for r in $(seq 0 $((ppn - 1))); do PMI_LOCAL_RANK=$r "$@"; done
"""


def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in {"python": RECORDER, "srun": RECORDER, "mpiexec": FAKE_MPIEXEC,
                       "module": "#!/bin/sh\nexit 0\n", "conda": "#!/bin/sh\nexit 0\n",
                       "scontrol": "#!/bin/sh\nprintf 'nodeA\\nnodeB\\n'\n"}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run_script(tmp_path: Path, site: SiteProfile, devices: int, extra_env: dict[str, str]) -> list[dict]:
    resolved = resolve(spec(site.name, devices), site, {"ORCH_ACCOUNT": "p", "ORCH_QOS": "q"}, site.python or "python")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(render_script(resolved, RunFiles(run_dir)))
    record = tmp_path / "record.jsonl"
    env = {"PATH": f"{fake_bin(tmp_path)}:/usr/bin:/bin", "HOME": str(tmp_path), "RECORD": str(record),
           **extra_env}
    subprocess.run(["bash", str(script)], env=env, check=True, capture_output=True, timeout=60)
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_polaris_ranks_see_their_gpus_in_reverse(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x1001\n")
    ranks = run_script(tmp_path, load_site("polaris"), 4, {"PBS_NODEFILE": str(nodefile), "PBS_JOBID": "1.pbs"})
    got = {r["env"]["PMI_LOCAL_RANK"]: r["env"]["CUDA_VISIBLE_DEVICES"] for r in ranks}
    assert got == {"0": "3", "1": "2", "2": "1", "3": "0"}  # CUDA_VISIBLE_DEVICES = 3 - local_rank % 4
    assert all(r["argv"][:2] == ["-m", "workloads.gemm"] for r in ranks)


def test_multinode_torchrun_meets_at_the_first_host(tmp_path: Path) -> None:
    site = load_site("baskerville").model_copy(update={"launcher": load_site("baskerville").launcher.model_copy(
        update={"name": "torchrun"})})
    (call,) = run_script(tmp_path, site, 8, {"SLURM_JOB_NODELIST": "node[A-B]", "SLURM_JOB_ID": "77"})
    assert call["prog"] == "srun" and call["argv"][:3] == ["--nodes=2", "--ntasks-per-node=1", "--ntasks=2"]
    assert "--nnodes=2" in call["argv"] and "--nproc-per-node=4" in call["argv"]
    assert call["env"]["PET_RDZV_ENDPOINT"] == "nodeA:29400" and call["env"]["PET_RDZV_ID"] == "77"
    assert call["env"]["MASTER_ADDR"] == "nodeA"


def test_deepspeed_hostfile(tmp_path: Path) -> None:
    base = load_site("baskerville")
    site = base.model_copy(update={"launcher": base.launcher.model_copy(update={"name": "deepspeed"})})
    text = render_script(resolve(spec("baskerville", 8), site, {"ORCH_ACCOUNT": "p", "ORCH_QOS": "q"}, "python"),
                         RunFiles(tmp_path))
    assert "scontrol show hostnames \"$SLURM_JOB_NODELIST\" | sed 's/$/ slots=4/' > orch-hostfile" in text
    assert "deepspeed --num_nodes=2 --num_gpus=4 --hostfile=orch-hostfile --launcher=slurm" in text
