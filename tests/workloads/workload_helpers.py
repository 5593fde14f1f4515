"""Helpers for running workloads as real processes (single and under torch.distributed.run)."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from orchestrator.results.metrics_schema import MetricsFile

REPO = Path(__file__).resolve().parents[2]
GLOSSARY = REPO / "db" / "glossary_metrics.yaml"


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




def glossary() -> dict[str, dict[str, Any]]:
    """db/glossary_metrics.yaml: metric name -> {formula, unit, studies, note}."""
    return yaml.safe_load(GLOSSARY.read_text())


def undocumented(names: Iterable[str]) -> list[str]:
    """The names the glossary lacks; a key with ``<S>`` stands for any number there."""
    keys = glossary()
    patterns = [re.compile(re.sub(r"<[^>]+>", "[0-9]+", re.escape(k)) + "$") for k in keys if "<" in k]
    return sorted(n for n in names if n not in keys and not any(p.match(n) for p in patterns))


def total_rate(work_per_step: float, step_times: Sequence[float]) -> float:
    """Work of all timed steps over their summed time (the studies' throughput)."""
    return work_per_step * len(step_times) / math.fsum(step_times)


def median_rate(work_per_step: float, step_times: Sequence[float]) -> float:
    return work_per_step / statistics.median(step_times)
