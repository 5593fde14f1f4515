"""The Debian packages the sandbox needs (Slurm, slurmdbd, munge; MariaDB where none answers)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.proc import _run

_apt_updated = False


def _apt_install(packages: list[str]) -> None:
    global _apt_updated
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not shutil.which("apt-get"):
        raise SandboxError(f"missing packages {packages} and no apt-get to install them (Debian/Ubuntu only)")
    if not _apt_updated:
        cp = _run(["apt-get", "update", "-q"], timeout=600, env=env)
        if cp.returncode != 0:
            raise SandboxError(f"apt-get update failed:\n{cp.stdout[-1500:]}{cp.stderr[-1500:]}")
        _apt_updated = True
    cp = _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], timeout=1200, env=env)
    if cp.returncode != 0:
        raise SandboxError(f"apt-get install {' '.join(packages)} failed:\n{cp.stdout[-1500:]}{cp.stderr[-1500:]}")


def _ensure_packages() -> None:
    needed = {
        "slurmctld": "slurmctld",
        "slurmd": "slurmd",
        "sbatch": "slurm-client",
        "slurmdbd": "slurmdbd",
        "munged": "munge",
    }
    missing = sorted({pkg for exe, pkg in needed.items() if not shutil.which(exe, path="/usr/sbin:/usr/bin")})
    if not Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_mysql.so").exists() and not any(
        Path("/usr/lib").glob("*/slurm-wlm/accounting_storage_mysql.so")
    ):
        missing.append("slurm-wlm-mysql-plugin")
    if missing:
        _apt_install(sorted(set(missing) | {"slurm-wlm", "slurmdbd", "munge"}))
