"""The tests' workload processes forked from an interpreter that has imported torch.

Every workload process, rank and torchrun the suite starts spends 2.2 s of this machine's CPU
importing torch before it does anything, 3.4 s with ``torch._dynamo`` (every optimizer imports
it), and the suite starts several hundred of them: the largest share of the suite's CPU
that is not the workloads' own work (benchmarks/RESULTS.md, issue 31). So each pytest process
runs a server (this file, run as a script) that imports torch and ``torch._dynamo`` once and forks a child per
workload process. The process a job script, a launcher or a test starts is still there: the
shim every test process imports (``warm_torch_shim/sitecustomize.py``) hands its start to the
server and stands in for the child (signals passed on, the child's exit status as its own).

What keeps the child what a fresh ``python -m workloads.X`` would be:
- it takes the process's arguments, environment, working directory, ``sys.path``, output files,
  cores (affinity), resource limits and umask, and its thread count (``OMP_NUM_THREADS``, else
  ``MKL_NUM_THREADS``, else torch's default, which the server's start under the same cores gave);
- the server imports torch and ``torch._dynamo`` and nothing of orch or the workloads (those read the environment when
  imported: they are imported in the child, under the process's own);
- a process whose interpreter, flags, torch, or environment that torch, its OpenMP runtime or the
  interpreter read when they start (``TORCH*``, ``PYTORCH*``, ``OMP_*``, ``KMP_*``, ``LD_*``,
  ``PYTHON*``, the locale) differs from the server's starts cold, as does every process in a
  Slurm job (its cgroup must hold it) and every one while no server answers.

What differs, and no test asserts on: the child's maximum RSS starts from the server's resident
pages (about 150 MB), not from a fresh import's transient peak (about 220 MB), so a tiny CPU
run's ``peak_mem_gb`` can read lower (the suite's memory checks use ``peak_tensor_bytes``); a
workload that would not have imported ``torch._dynamo`` (no optimizer: gemm, inference) finds it
imported; numpy's OpenBLAS threads are the server's; the child is not the stand-in's child
(``os.getppid()``).

``ORCH_TEST_COLD=1`` starts every process cold (the way to check that a failure is not this file's).
"""

from __future__ import annotations

import atexit
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

SOCKET_ENV = "WARM_TORCH_SOCKET"
SHIM = Path(__file__).resolve().parent / "warm_torch_shim"
COLD_ENV = "ORCH_TEST_COLD"
# Read when the interpreter, torch, its OpenMP runtime or MKL start; a process whose values differ
# from the server's starts cold. The thread counts and the ones below that are applied are not.
COLD_PREFIXES = ("PYTHON", "LD_", "LC_", "TORCH", "PYTORCH", "OMP_", "KMP_", "GOMP_", "MKL_", "CUDA", "HIP_")
COLD_NAMES = ("LANG", "LANGUAGE", "TZ")
APPLIED = ("PYTHONPATH", "PYTHONUNBUFFERED", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# What torchrun gives its workers and torch reads only later (when a process group starts, when a
# worker fails), not when it is imported.
LATER = ("TORCHELASTIC_", "TORCH_NCCL_")
# Not given to the server: its torch's default thread count must be the one a fresh process gets.
THREAD_COUNTS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def read_at_start(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if (k.startswith(COLD_PREFIXES) or k in COLD_NAMES) and k not in APPLIED and not k.startswith(LATER)}


# --- the server (this file run as a script) --------------------------------------------------

class _Server:
    def __init__(self, path: str) -> None:
        import ctypes

        start_env = dict(os.environ)
        import torch
        import torch._dynamo  # noqa: F401  (every optimizer imports it: 1.2 s more per process)

        # What importing torch set in the environment (TORCHINDUCTOR_CACHE_DIR): a fresh process's
        # import sets it too, where the process has not.
        self.set_by_import = {k: v for k, v in os.environ.items() if start_env.get(k) != v}
        self.start_env = start_env
        self.pid = os.getpid()
        self.path = path
        self.cpu_file = os.path.join(os.path.dirname(path), "cpu")
        self.torch_file = torch.__file__
        self.default_threads = torch.get_num_threads()  # under the server's cores and no thread count
        self.affinity = sorted(os.sched_getaffinity(0))
        self.libc = ctypes.CDLL(None, use_errno=True)

    def serve(self, parent: int) -> dict[str, Any] | None:
        """Accept until the pytest process is gone; in a forked workload child, return its request."""
        # What is imported stays: out of the children's collections, whose walks over it would
        # copy every page it lies on (0.4 s of CPU per child).
        import gc

        from fork_server import accept_forked  # imported by _main while tests/ was sys.path[0]

        gc.freeze()
        try:
            conn = accept_forked(self.path, parent)
            return None if conn is None else self._handle(conn)  # returns only in the workload child
        finally:
            if os.getpid() == self.pid:
                _remove(self.path)

    def _handle(self, conn: socket.socket) -> dict[str, Any]:
        """One process: fork its child, report the child's pid, then how it ended. Returns only in
        the child, with the process's request (an error there ends it with status 1)."""
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 22, 3)
            if not data:  # wait_ready's probe
                os._exit(0)
            request = json.loads(data)
            reason = self.cold_reason(request)
            if reason:
                conn.sendall(json.dumps({"cold": reason}).encode())
                os._exit(0)
            pid = os.fork()
        except BaseException:
            import traceback

            traceback.print_exc()  # to the pytest process's stderr: a fault of this file
            os._exit(1)
        if pid == 0:
            try:
                conn.close()
                self._become(request, fds)
            except BaseException:
                import traceback

                traceback.print_exc()
                os._exit(1)
            return request
        try:
            try:
                os.setpgid(pid, pid)  # the child does too: whichever runs first, the group exists
            except OSError:
                pass
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode())
            self._wait(conn, pid)
        finally:
            os._exit(0)

    def _wait(self, conn: socket.socket, pid: int) -> None:
        import select

        child = os.pidfd_open(pid)
        while True:
            ready, _, _ = select.select([conn.fileno(), child], [], [])
            if child in ready:
                _, status, usage = os.wait4(pid, 0)
                with open(self.cpu_file, "a") as out:  # the pytest process counts its tests' CPU
                    out.write(f"{usage.ru_utime + usage.ru_stime:.3f}\n")
                conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
                return
            if not conn.recv(4096):  # the stand-in is gone (killed): so is its process group
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    os.kill(pid, signal.SIGKILL)
                os.wait4(pid, 0)
                return

    def cold_reason(self, request: dict[str, Any]) -> str:
        """Why the process must start cold ("" where the child would be what it would be)."""
        env = request["env"]
        if os.environ.get(COLD_ENV) or env.get(COLD_ENV):
            return COLD_ENV
        if request["executable"] != sys.executable or request["flags"] != list(sys.flags):
            return "another interpreter or other interpreter flags"
        if request["torch"] != self.torch_file:
            return "another torch on its path"
        # What the server's import set counts as set: the process's own import sets it the same.
        ours = read_at_start({**self.start_env, **self.set_by_import})
        theirs = read_at_start({**self.set_by_import, **env})
        if ours != theirs:
            return "the environment read at start differs: " + ", ".join(sorted(set(ours) ^ set(theirs) | {
                k for k in set(ours) & set(theirs) if ours[k] != theirs[k]}))
        threads = env.get("OMP_NUM_THREADS") or env.get("MKL_NUM_THREADS")
        if threads is None and request["affinity"] != self.affinity:
            return "torch's default thread count depends on the cores"
        if threads is not None and not threads.strip().isdigit():
            return "a thread count torch would read otherwise"
        import resource

        for name, (_soft, hard) in request["rlimits"].items():
            _, ours_hard = resource.getrlimit(getattr(resource, name))
            if ours_hard != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > ours_hard):
                return f"{name} above the server's"
        return ""

    def _become(self, request: dict[str, Any], fds: list[int]) -> None:
        """Take the process's place: its files, directory, limits, cores, environment and path."""
        import resource

        os.setpgid(0, 0)
        self.libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the handler's end is this one's
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        # The stand-in's dispositions: ignored where it inherited them ignored, else an
        # interpreter's own (SIGINT raises KeyboardInterrupt).
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                       signal.SIGUSR2, signal.SIGALRM):
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, signal.SIG_IGN if signum in request["ignored"] else default)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        for name, limits in request["rlimits"].items():
            resource.setrlimit(getattr(resource, name), tuple(limits))
        os.sched_setaffinity(0, request["affinity"])
        os.environ.clear()
        os.environ.update({**self.set_by_import, **request["env"]})
        sys.path[:] = request["path"]
        sys.argv = ["-m", *request["args"]]
        sys.orig_argv[:] = request["orig_argv"]
        _open_streams(request)
        import torch

        threads = request["env"].get("OMP_NUM_THREADS") or request["env"].get("MKL_NUM_THREADS")
        torch.set_num_threads(int(threads) if threads else self.default_threads)


def _open_streams(request: dict[str, Any]) -> None:
    """sys.stdin, stdout and stderr as the interpreter makes them (``-u``: unbuffered)."""
    import io

    unbuffered = request["unbuffered"]

    def text(fd: int, mode: str, spec: dict[str, Any]) -> io.TextIOWrapper:
        binary = io.open(fd, mode, buffering=0 if unbuffered and mode == "wb" else -1, closefd=False)
        return io.TextIOWrapper(binary, encoding=spec["encoding"], errors=spec["errors"],  # type: ignore[arg-type]
                                newline=None if mode == "rb" else "\n",
                                line_buffering=bool(spec["line_buffering"]), write_through=bool(spec["write_through"]))

    sys.stdin = text(0, "rb", request["stdin"])
    sys.stdout = text(1, "wb", request["stdout"])
    sys.stderr = text(2, "wb", request["stderr"])
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr  # type: ignore[misc]


def _remove(path: str) -> None:
    Path(path).unlink(missing_ok=True)
    Path(path).with_name("cpu").unlink(missing_ok=True)
    try:
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass


def _main(path: str, parent: int) -> None:
    import fork_server  # noqa: F401  (this folder: imported before it leaves sys.path)

    sys.path[0] = os.getcwd()  # not tests/, whose packages would shadow the workloads'
    request = _Server(path).serve(parent)
    if request is None:
        return
    # The workload child: run the module as `python -m` does, then end as an interpreter does
    # (threads joined, atexit run, files closed), here at the top, out of the server's frames.
    import runpy

    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


# --- the client (imported by tests/conftest.py) ------------------------------------------------

_lock = threading.Lock()
_proc: subprocess.Popen[bytes] | None = None
_path = ""


def install() -> None:
    """Put the shim on the environment every test process inherits, with this process's socket
    (before tests/warm_orch.py keeps the environment its commands are compared with)."""
    global _path
    _path = os.path.join(tempfile.mkdtemp(prefix="orch-warm-torch-"), "socket")
    os.environ[SOCKET_ENV] = _path
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SHIM)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SHIM), *paths])


def start() -> None:
    """Start this process's server, once; until it listens, processes start cold."""
    global _proc
    with _lock:
        if _proc is not None or not _path or os.environ.get(COLD_ENV):
            return
        env = {k: v for k, v in os.environ.items() if k not in THREAD_COUNTS}
        _proc = subprocess.Popen([sys.executable, __file__, _path, str(os.getpid())], env=env,
                                 cwd=os.path.dirname(_path), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        atexit.register(stop)


def wait_ready(timeout: float) -> bool:
    """True once this process's server accepts (False: none started, or not within ``timeout``)."""
    import time

    deadline = time.monotonic() + timeout
    while _proc is not None and _proc.poll() is None and time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
            try:
                probe.connect(_path)
                return True
            except OSError:
                time.sleep(0.2)
    return False


def stop() -> None:
    if _proc is not None and _proc.poll() is None:
        _proc.kill()
        _proc.wait()
    if _path:
        _remove(_path)


def cpu_seconds() -> float:
    """CPU of the workload processes this process's server has run: they are its grandchildren,
    so RUSAGE_CHILDREN leaves them out (tests/conftest.py adds this to each test's count)."""
    try:
        text = Path(_path).with_name("cpu").read_text()
    except OSError:
        return 0.0
    return sum(float(line) for line in text.split())


if __name__ == "__main__":
    _main(sys.argv[1], int(sys.argv[2]))
