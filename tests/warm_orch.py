"""``orch`` commands for the tests, each a process of its own, forked from a warm interpreter.

A test runs orch as a user does: a new process, its own environment, working directory and
output, its exit status. Started cold, each one spent 0.3-0.75 s of this 2-core machine's CPU
before doing anything, nearly all of it importing SQLAlchemy, typer, rich, pydantic, Jinja2 and
alembic, and the suite starts about 1,000 (benchmarks/RESULTS.md, issue 31). So each pytest
process starts one server (this file, run as a script) that imports those third-party libraries
once and then forks a child per command. The child takes the command's environment, working
directory, ``sys.path[0]`` and output files, then runs ``python -m orchestrator.cli`` through
:func:`runpy.run_module` and exits as an interpreter does (threads joined, ``atexit`` run).

What keeps the child a fresh orch:
- The server imports no module of orch or workloads: those read the environment when imported
  (``ORCH_LOST_AFTER_S``, say), so they are imported in the child, under the command's own.
- No library that starts threads when imported (numpy, torch, matplotlib) is imported before the
  fork.
- A command whose environment differs from the server's in what an interpreter or those libraries
  read when they start (``PYTHON*``, ``LD_*``, the locale, ``TZ``, colour and width switches) runs
  cold, as before. So does every command when the server cannot be started or has died.

``ORCH_TEST_COLD=1`` runs every command cold (the way to check that a failure is not this file's).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# The third-party modules orch's commands import (`python -X importtime` of plan, run, status,
# sql, report, sites and results), less what starts threads or reads the environment on import.
WARM_MODULES = (
    "sqlalchemy", "sqlalchemy.orm", "sqlalchemy.ext.compiler", "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql", "sqlalchemy.pool", "alembic", "alembic.command", "alembic.config",
    "alembic.script", "alembic.runtime.migration", "alembic.runtime.environment", "alembic.operations",
    "alembic.autogenerate", "mako.template", "typer", "typer.main", "typer.core", "typer.rich_utils", "rich",
    "rich.console", "rich.table", "rich.progress", "rich.panel", "rich.markup", "rich.text", "rich.live",
    "rich.syntax", "rich.markdown", "rich.traceback", "rich.pretty", "pydantic", "pydantic.main",
    "pydantic.fields", "pydantic_core", "yaml", "jinja2", "jinja2.sandbox", "markupsafe", "submitit",
    "submitit.local.local", "submitit.slurm.slurm", "submitit.core.core", "cloudpickle", "psycopg",
    "sqlite3", "asyncio", "email.utils", "uuid", "zoneinfo", "concurrent.futures", "logging.handlers",
    "shlex", "csv", "decimal", "statistics", "tomllib", "importlib.metadata", "html", "urllib.parse",
    "pydantic.type_adapter", "pydantic.plugin._loader", "rich._emoji_codes", "typer._adapters",
    "typer._click.decorators", "encodings.unicode_escape",
)
# What an interpreter, or a module imported above, reads from the environment when it starts.
# Thread counts (OMP_NUM_THREADS ...) are not among them: nothing above loads a BLAS or OpenMP
# runtime, so the child's numpy or torch reads the command's own when it imports them.
COLD_PREFIXES = ("PYTHON", "LD_", "LC_", "TYPER", "_TYPER", "SUBMITIT")
COLD_NAMES = ("LANG", "LANGUAGE", "TZ", "TERM", "FORCE_COLOR", "NO_COLOR", "PY_COLORS", "TERMINAL_WIDTH",
              "GITHUB_ACTIONS", "CI")
COLD_ENV = "ORCH_TEST_COLD"


def read_at_start(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(COLD_PREFIXES) or k in COLD_NAMES}


# --- the server (this file run as a script) --------------------------------------------------

def import_warm_modules() -> None:
    """What the server imports before it forks (tests/unit/test_warm_orch.py checks what it loads)."""
    for name in WARM_MODULES:
        try:
            __import__(name)
        except Exception:  # an optional one (psycopg) missing: the child imports what it needs
            pass


def _serve(path: str, parent: int) -> None:
    from fork_server import accept_forked  # this folder, still sys.path[0]

    sys.path[0] = os.getcwd()  # not tests/, whose packages (workloads, sites) would shadow orch's
    import_warm_modules()
    server = os.getpid()
    try:
        conn = accept_forked(path, parent)
        if conn is not None:
            _handle(conn)  # never returns
    finally:
        if os.getpid() == server:
            _remove(path)


def _remove(path: str) -> None:
    Path(path).unlink(missing_ok=True)
    try:
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass


def _handle(conn: socket.socket) -> None:
    """One command: a child runs it, this process reports its pid, then its exit status."""
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run(request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"pid": pid}).encode())
        _, wait_status, usage = os.wait4(pid, 0)
        status = os.waitstatus_to_exitcode(wait_status)
        cpu = usage.ru_utime + usage.ru_stime  # the command's, and its waited-for processes'
        conn.sendall(json.dumps({"returncode": status, "cpu_s": cpu}).encode())
    finally:
        os._exit(0)


def _run(request: dict[str, Any], fds: list[int]) -> None:
    """Become ``python -m orchestrator.cli ARGS`` in the request's directory and environment."""
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (devnull, *fds):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = os.getcwd()  # as `python -m` puts the working directory first
        sys.argv = ["orch", *request["args"]]
        sys.stdin = open(0, closefd=False)
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), line_buffering=False)
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), line_buffering=True,
                                      errors="backslashreplace")
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr  # type: ignore[misc]
        import runpy

        try:
            runpy.run_module("orchestrator.cli", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # an interpreter joins its threads at exit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# --- the client (imported by the tests) --------------------------------------------------------

class _Server:
    """The server of this pytest process, started on first use; None where it could not be."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        # The environment this pytest process started with (conftest imports this file before any
        # test runs), not the first command's: a test that set LC_ALL or PYTHONPATH for its own
        # commands must not make every later command of this process cold.
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}, "COLUMNS": "200"}
        self.path = ""
        self.failed = False

    def running(self) -> bool:
        with self.lock:
            if self.proc is None and not self.failed:
                self._start()
            return self.proc is not None and self.proc.poll() is None

    def _start(self) -> None:
        folder = tempfile.mkdtemp(prefix="orch-warm-")
        self.path = os.path.join(folder, "socket")
        try:
            self.proc = subprocess.Popen([sys.executable, __file__, self.path, str(os.getpid())], env=self.env,
                                         cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
            assert self.proc.stdout is not None
            if self.proc.stdout.readline().strip() != b"ready":
                raise OSError("the server did not start")
        except OSError:
            self.failed, self.proc = True, None
            return
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.path:
            _remove(self.path)


_SERVER = _Server()
# CPU seconds of the commands this process ran warm: they are the server's grandchildren, so
# RUSAGE_CHILDREN leaves them out (tests/conftest.py adds this to each test's count).
cpu_seconds = 0.0


def run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, -m, orchestrator.cli, *args], capture_output=True, text=True)``,
    forked warm where the command's environment allows it."""
    cmd = [sys.executable, "-m", "orchestrator.cli", *args]
    if os.environ.get(COLD_ENV) or read_at_start(env) != read_at_start(_SERVER.env) or not _SERVER.running():
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(_SERVER.path)
        request = {"args": list(args), "cwd": str(cwd), "env": env}
        socket.send_fds(conn, [json.dumps(request).encode()], [out.fileno(), err.fileno()])
        conn.settimeout(timeout)
        started = conn.recv(4096)
        if not started:
            raise OSError(f"the warm orch server could not start `orch {' '.join(args)}`")
        pid = json.loads(started)["pid"]
        try:
            reply = conn.recv(4096)
        except socket.timeout:
            os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(cmd, timeout, _text(out), _text(err)) from None
        if not reply:
            raise OSError(f"the warm orch server ended during `orch {' '.join(args)}`")
        ended = json.loads(reply)
        global cpu_seconds
        cpu_seconds += ended["cpu_s"]
        return subprocess.CompletedProcess(cmd, ended["returncode"], _text(out), _text(err))


def _text(file: Any) -> str:
    """What subprocess's text mode gives: the locale's encoding, universal newlines."""
    file.seek(0)
    return io.TextIOWrapper(io.BytesIO(file.read()), newline=None).read()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
