"""munged, which authenticates every Slurm message: its key, directories and process."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.facts import MUNGE_KEY, MUNGE_LOG, MUNGE_PID
from orchestrator.sites.sandbox.proc import _pid_alive, _run, _tail


def _munge_ok() -> bool:
    cp = _run(["munge", "-n"], timeout=10)
    if cp.returncode != 0:
        return False
    return _run(["unmunge"], timeout=10, input=cp.stdout).returncode == 0


def _ensure_munge() -> None:
    if _pid_alive(MUNGE_PID, "munged") and _munge_ok():
        return
    for d, mode in ((Path("/etc/munge"), 0o700), (Path("/var/lib/munge"), 0o700),
                    (Path("/var/log/munge"), 0o700), (Path("/run/munge"), 0o755)):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "munge", "munge")
        d.chmod(mode)
    if not MUNGE_KEY.exists():
        if shutil.which("mungekey", path="/usr/sbin:/usr/bin"):
            _run(["mungekey", "--create", f"--keyfile={MUNGE_KEY}"], check=True)
        else:
            MUNGE_KEY.write_bytes(os.urandom(1024))
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    # A stale socket or pid file from a killed munged stops a new one.
    if not _pid_alive(MUNGE_PID, "munged"):
        for stale in (MUNGE_PID, Path("/run/munge/munge.socket.2"), Path("/run/munge/munge.socket.2.lock")):
            stale.unlink(missing_ok=True)
        cp = _run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], timeout=30)
        if cp.returncode != 0:
            raise SandboxError(f"munged did not start: {cp.stderr.strip()}\n{_tail(MUNGE_LOG)}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _munge_ok():
            return
        time.sleep(0.2)
    raise SandboxError(f"munged runs but `munge -n | unmunge` fails\n{_tail(MUNGE_LOG)}")
