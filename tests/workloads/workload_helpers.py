"""Helpers for running workloads as real processes (single and under torch.distributed.run)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchestrator.metrics_schema import MetricsFile

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"  # two cores shared: keep each rank on one
    for key in [k for k in env if k.startswith(("SLURM_", "PMI_", "PALS_", "OMPI_"))] + [
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"]:
        env.pop(key, None)  # a test run inside a job must not join that job's ranks
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_module(module: str, args: list[str], *, nproc: int = 1, timeout: float = 180,
               check: bool = True) -> subprocess.CompletedProcess[str]:
    if nproc == 1:
        cmd = [sys.executable, "-m", module, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               "--nnodes=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_free_port()}",
               "-m", module, *args]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                             f"\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def load_valid(path: Path) -> dict[str, Any]:
    """The metrics file, checked against the orchestrator's schema."""
    doc = json.loads(path.read_text())
    MetricsFile.model_validate(doc)
    return doc


