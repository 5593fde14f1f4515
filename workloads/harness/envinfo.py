"""The software and hardware a result came from (its provenance)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from workloads.harness.device import Device, cpu_model

# Scheduler and launcher variables worth keeping with the result.
_ENV_KEYS = (
    "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_PARTITION",
    "PBS_JOBID", "PBS_QUEUE", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK", "HABANA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME", "ORCH_RUN_ID",
)


def _run(cmd: list[str], cwd: str | None = None) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info() -> dict[str, Any]:
    """Commit of the checkout holding ``workloads`` (absent when installed from a wheel)."""
    here = Path(__file__).resolve().parent
    if not any((parent / ".git").exists() for parent in here.parents):
        return {}
    rev = _run(["git", "rev-parse", "HEAD"], cwd=str(here))
    if rev is None:
        return {"git_rev": None}
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=str(here))
    return {"git_rev": rev, "git_dirty": bool(dirty)}


def _driver(device: Device) -> str | None:
    if device.type == "cuda" and not device.is_rocm:
        out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        return out.splitlines()[0].strip() if out else None
    if device.type == "cuda" and device.is_rocm:
        try:
            return Path("/sys/module/amdgpu/version").read_text().strip()
        except OSError:
            return None
    return None


def capture(device: Device, backend: str | None) -> dict[str, Any]:
    """This process's environment; the session adds ``hostnames`` of all ranks."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "xpu": getattr(torch.version, "xpu", None),
        "oneapi": os.environ.get("ONEAPI_ROOT") or os.environ.get("CMPLR_ROOT"),
        "nccl": None,
        "cudnn": None,
        "driver": _driver(device),
        "backend": backend,
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu_model": device.model if device.type != "cpu" else None,
        "argv": sys.argv,
    }
    if device.type == "cuda":
        try:
            version = torch.cuda.nccl.version()
            info["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except Exception:
            pass
        info["cudnn"] = torch.backends.cudnn.version()
    for module in ("numpy", "deepspeed", "habana_frameworks.torch", "oneccl_bindings_for_pytorch"):
        mod = sys.modules.get(module)
        if mod is not None:
            info[module.split(".")[0]] = getattr(mod, "__version__", None)
    info["scheduler_env"] = {key: os.environ[key] for key in _ENV_KEYS if key in os.environ}
    info.update(git_info())
    return info
