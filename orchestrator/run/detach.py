"""A follower that outlives the terminal: ``orch status --watch`` in its own session.

A campaign on a real cluster runs for hours or days; the person who submitted it logs out. The
follower is the ecosystem's usual answer: a process in a new session (``setsid``: no controlling
terminal, so a closed SSH connection's SIGHUP never reaches it), stdin from /dev/null, its output
appended to a log, and a pid file that says which process it is. One follower per orch state
directory (``$ORCH_HOME/.orch``); it ends by itself when no run is active any more.

A pid file can outlive its process and the pid be reused by another, so a follower is taken
as alive only when the pid's process still has the start time recorded at spawn (Linux: field 22
of ``/proc/<pid>/stat``; elsewhere: that the pid exists).

Where login-node processes are reaped (some centres kill long-running processes on login
nodes), the scheduler-side alternative is one poll per cron tick: ``orch status`` polls once and
returns; docs/guide.md, "Your first campaign on a real cluster", gives a ``scrontab`` line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

PID_FILE = "follower.json"
LOG_FILE = "follower.log"


@dataclass(frozen=True)
class Follower:
    """What the pid file says about a follower."""

    pid: int
    started_at: str  # ISO 8601, UTC
    proc_start: str | None  # /proc/<pid>/stat field 22 at spawn (None off Linux)
    args: list[str]  # the orch command it runs (no database URL: that travels in its environment)
    log: str
    cwd: str


def pid_path(state_dir: Path) -> Path:
    return state_dir / PID_FILE


def log_path(state_dir: Path) -> Path:
    return state_dir / LOG_FILE


def _proc_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count fields after it.
    return stat.rsplit(")", 1)[1].split()[19]


def read(state_dir: Path) -> Follower | None:
    """The follower the pid file names, or None when there is none (or the file is unreadable)."""
    try:
        data = json.loads(pid_path(state_dir).read_text())
        return Follower(**data)
    except (OSError, ValueError, TypeError):
        return None


def is_alive(follower: Follower) -> bool:
    try:
        os.kill(follower.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the pid
        return False
    if follower.proc_start is None:
        return True
    return _proc_start(follower.pid) == follower.proc_start


def running(state_dir: Path) -> Follower | None:
    """The live follower of this state directory, if any."""
    follower = read(state_dir)
    return follower if follower is not None and is_alive(follower) else None


def start(state_dir: Path, args: list[str], env: dict[str, str], cwd: Path) -> Follower:
    """Start ``python -m orchestrator.cli ARGS`` detached; refuses when one is already running."""
    live = running(state_dir)
    if live is not None:
        raise RuntimeError(f"a follower is already running (pid {live.pid}, since {live.started_at}; "
                           f"log {live.log}); `orch follow stop` ends it")
    state_dir.mkdir(parents=True, exist_ok=True)
    log = log_path(state_dir)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with open(log, "a") as out:
        out.write(f"--- {stamp} follower starting: orch {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True,
                                close_fds=True)
    follower = Follower(pid=proc.pid, started_at=stamp, proc_start=_proc_start(proc.pid), args=list(args),
                        log=str(log), cwd=str(cwd))
    tmp = pid_path(state_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(follower), indent=2) + "\n")
    tmp.replace(pid_path(state_dir))
    return follower


def stop(state_dir: Path, timeout_s: float = 30.0) -> Follower | None:
    """SIGTERM the live follower and wait for it to end; returns it (None: none was running).

    A poll killed mid-way loses nothing: each poll's changes are committed transactions, and a
    submission interrupted between its intent and the scheduler's answer is repaired by the next."""
    follower = running(state_dir)
    if follower is None:
        pid_path(state_dir).unlink(missing_ok=True)
        return None
    os.kill(follower.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while is_alive(follower) and time.monotonic() < deadline:
        try:  # our own child when started by this process (tests): reap it
            os.waitpid(follower.pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    if is_alive(follower):
        os.kill(follower.pid, signal.SIGKILL)
    pid_path(state_dir).unlink(missing_ok=True)
    return follower


def log_tail(follower: Follower | None, state_dir: Path, lines: int = 10) -> list[str]:
    path = Path(follower.log) if follower else log_path(state_dir)
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []
