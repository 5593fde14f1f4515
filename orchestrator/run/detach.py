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

from orchestrator.safefile import append_private, open_regular, read_fd, replace_file

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


class BadPidFile(ValueError):
    """A pid file that is not one orch wrote (wrong types, too large, not a regular file)."""


# A pid file is a few hundred bytes.
PID_FILE_LIMIT = 64 * 1024
# How a follower's command line starts after the interpreter (``start`` runs it so).
FOLLOWER_MODULE = ["-m", "orchestrator.cli"]


def read(state_dir: Path) -> Follower | None:
    """The follower the pid file names; None when there is no pid file. The file lives where jobs
    can write: anything but what ``start`` wrote raises BadPidFile (one line, no traceback)."""
    path = pid_path(state_dir)
    try:
        fd = open_regular(path, follow=False)  # never a FIFO (hangs) or a link to /dev/zero
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadPidFile(f"{path}: not read ({exc})") from None
    try:
        raw = read_fd(fd, PID_FILE_LIMIT)
    finally:
        os.close(fd)
    if raw is None:
        raise BadPidFile(f"{path}: larger than {PID_FILE_LIMIT} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadPidFile(f"{path}: not valid JSON") from None
    fields = list(Follower.__dataclass_fields__)
    if not isinstance(data, dict) or set(data) != set(fields):
        raise BadPidFile(f"{path}: expected an object with the fields {', '.join(fields)}")
    pid, proc_start, args = data["pid"], data["proc_start"], data["args"]
    if type(pid) is not int or not 1 < pid < 2 ** 22 + 1:
        raise BadPidFile(f"{path}: pid: expected a process id above 1, got {pid!r}"[:300])
    if proc_start is not None and not (isinstance(proc_start, str) and proc_start.isdigit()):
        raise BadPidFile(f"{path}: proc_start: expected a process start time, got {proc_start!r}"[:300])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise BadPidFile(f"{path}: args: expected a list of text")
    for name in ("started_at", "log", "cwd"):
        if not isinstance(data[name], str):
            raise BadPidFile(f"{path}: {name}: expected text, got {data[name]!r}"[:300])
    return Follower(**data)


def is_alive(follower: Follower) -> bool:
    """Whether the follower still runs: its pid names a live process with the start time recorded
    at spawn (a pid gets reused) and the command line ``python -m orchestrator.cli ARGS`` with the
    recorded arguments (a pid file rewritten by a job may name any process: -1, 0, orch itself)."""
    if follower.pid <= 1 or follower.proc_start is None:
        return False
    if _proc_start(follower.pid) != follower.proc_start:
        return False
    try:
        cmdline = Path(f"/proc/{follower.pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return cmdline[1:-1] == [*FOLLOWER_MODULE, *follower.args]


def running(state_dir: Path) -> Follower | None:
    """The live follower of this state directory, if any (a bad pid file: none)."""
    try:
        follower = read(state_dir)
    except BadPidFile:
        return None
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
    try:  # never through a link planted at the log's name, never into a FIFO
        fd = append_private(log)
    except OSError as exc:
        raise RuntimeError(f"{log}: cannot write the follower's log ({exc})") from None
    with os.fdopen(fd, "a") as out:
        out.write(f"--- {stamp} follower starting: orch {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen([sys.executable, *FOLLOWER_MODULE, *args], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True,
                                close_fds=True)
    follower = Follower(pid=proc.pid, started_at=stamp, proc_start=_proc_start(proc.pid), args=list(args),
                        log=str(log), cwd=str(cwd))
    # Its own temporary name, made exclusively: a fixed ``follower.tmp`` could be a planted link.
    replace_file(pid_path(state_dir), (json.dumps(asdict(follower), indent=2) + "\n").encode(), 0o600)
    return follower


def stop(state_dir: Path, timeout_s: float = 30.0) -> Follower | None:
    """SIGTERM the live follower and wait for it to end; returns it (None: none was running).
    Only a process that ``is_alive`` says is this directory's follower is ever signalled; a pid
    file that is not orch's raises BadPidFile and nothing is signalled.

    A poll killed mid-way loses nothing: each poll's changes are committed transactions, and a
    submission interrupted between its intent and the scheduler's answer is repaired by the next."""
    follower = read(state_dir)
    if follower is None:
        return None
    if not is_alive(follower):
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
    if is_alive(follower):  # checked again just before: the pid is still the follower's
        os.kill(follower.pid, signal.SIGKILL)
    pid_path(state_dir).unlink(missing_ok=True)
    return follower


# The end of the log read for ``orch follow status``: a few screens.
LOG_TAIL_BYTES = 64 * 1024


def log_tail(state_dir: Path, lines: int = 10) -> list[str]:
    """The last ``lines`` lines of this state directory's follower log (not the path the pid file
    names: a job could point it anywhere), from at most its last 64 KiB."""
    try:
        fd = open_regular(log_path(state_dir), follow=False)
    except OSError:
        return []
    try:
        os.lseek(fd, max(0, os.fstat(fd).st_size - LOG_TAIL_BYTES), os.SEEK_SET)
        data = read_fd(fd, LOG_TAIL_BYTES) or b""
    except OSError:
        return []
    finally:
        os.close(fd)
    return data.decode(errors="replace").splitlines()[-lines:] if lines > 0 else []
