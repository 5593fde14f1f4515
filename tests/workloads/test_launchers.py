"""Two ranks started the way srun and mpiexec (PALS) start them: only their variables, no torchrun."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workloads.workload_helpers import REPO, _env, load_valid


def _free_port_in_job_range() -> int:
    # The harness derives the port as 20000 + job id mod 20000: find a free one there.
    for _ in range(100):
        port = random.randint(20000, 39999)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000..39999")


@pytest.mark.parametrize("launcher", ["slurm", "pals"])
def test_two_ranks_from_scheduler_variables(launcher: str, tmp_path: Path) -> None:
    port = _free_port_in_job_range()
    out = tmp_path / "m.json"
    procs = []
    for rank in range(2):
        env = _env()
        if launcher == "slurm":
            env.update(SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_STEP_ID="0",
                       SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2", SLURM_JOB_NODELIST="localhost",
                       SLURM_JOB_ID=str(port - 20000))
        else:
            nodefile = tmp_path / "nodefile"
            nodefile.write_text("localhost\nlocalhost\n")
            env.update(PALS_RANKID=str(rank), PALS_LOCAL_RANKID=str(rank), PMI_SIZE="2",
                       PBS_NODEFILE=str(nodefile), PBS_JOBID=f"{port - 20000}.pbs-server")
        cmd = [sys.executable, "-m", "workloads.gemm", "--size-m", "32", "--size-n", "32", "--size-k", "32",
               "--warmup", "1", "--iters", "2", "--output", str(out)]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    doc = load_valid(out)
    expected = "slurm" if launcher == "slurm" else "pmi"
    assert doc["world_size"] == 2 and doc["env"]["launcher"] == expected
