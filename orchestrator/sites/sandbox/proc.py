"""Processes for the sandbox: commands, pid files, log tails, root.

Every command of the package goes through :func:`_run`, which never raises for a command
that fails or hangs (a daemon that is down is a state to report, not a crash), and runs it
without the ``SLURM_*`` variables of a job orch may be running inside (:func:`_clean_env`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from orchestrator.sites.sandbox.errors import SandboxError


def _run(cmd: list[str], timeout: float = 30, check: bool = False, env: dict | None = None,
         input: str | None = None) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, input=input)
    except FileNotFoundError as e:
        cp = subprocess.CompletedProcess(cmd, 127, "", str(e))
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        cp = subprocess.CompletedProcess(cmd, 124, out, f"timed out after {timeout}s")
    if check and cp.returncode != 0:
        raise SandboxError(
            f"command failed ({cp.returncode}): {' '.join(cmd)}\n{(cp.stdout or '')[-2000:]}{(cp.stderr or '')[-2000:]}"
        )
    return cp


def _clean_env() -> dict:
    # Commands run here must not see the variables of a job we might be running inside.
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}


def _tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return f"--- last {min(n, len(lines))} lines of {path} ---\n" + "\n".join(lines[-n:])


def _pid_alive(pidfile: Path, comm: str) -> int | None:
    """Pid from the pid file if that process runs and is ``comm``; else None."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        actual = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if not comm.startswith(actual) and not actual.startswith(comm[:15]):
        return None
    return pid


def _stop_pid(pid: int, timeout: float = 15) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return
        try:
            # Reap it if it is our child (it is not, when daemonised; harmless).
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            if state == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _require_root() -> None:
    if os.geteuid() != 0:
        raise SandboxError(
            "the Slurm sandbox needs root (it installs packages, writes /etc/slurm and starts "
            "munged, slurmdbd, slurmctld and slurmd); run `orch sandbox up` as root"
        )


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
