"""The tests' workload processes, forked from an interpreter that has imported torch already.

This folder is on the suite's PYTHONPATH (tests/warm_torch.py puts it there), so every Python
process the tests start imports this file first. For all but one kind it does nothing. A process
started as ``python [-u] -m workloads.NAME ...`` or ``python [-u] -m torch.distributed.run ...``
(a run's workload, a rank, torchrun) asks this pytest process's torch server to fork it a child
that has imported torch: the child takes this process's arguments, environment, working
directory, ``sys.path``, output files, cores, limits and umask, and runs the module as ``python
-m`` would. This process stays as the child's stand-in, so that whoever started it (bash, a
launcher, a test) sees one process as before: it passes on every signal it can catch, and
exits as the child did (its code, or killed by its signal). Killed itself (SIGKILL), the server
kills the child's process group.

Where the server says the child would differ from a fresh process (another interpreter, flags,
an environment torch reads when imported), or is not there, start-up goes on cold, as if this
file did not exist. Inside a Slurm job it always does: the job's cgroup must hold its processes.
"""

from __future__ import annotations

import os
import sys

MODULES = ("workloads.", "torch.distributed.run")
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")


def _module_run() -> tuple[bool, str, list[str]] | None:
    """(unbuffered, module, args) of ``python [-u] -m MODULE ARGS``; None for any other start."""
    argv = sys.orig_argv[1:]
    unbuffered = False
    while argv and argv[0] == "-u":
        unbuffered, argv = True, argv[1:]
    if len(argv) < 2 or argv[0] != "-m" or not argv[1].startswith(MODULES):
        return None
    return unbuffered, argv[1], argv[2:]


def _stream(stream: object) -> dict[str, object]:
    return {name: getattr(stream, name, None) for name in ("encoding", "errors", "line_buffering", "write_through")}


def _forward() -> None:
    path = os.environ.get("WARM_TORCH_SOCKET")
    run = _module_run() if path and "SLURM_JOB_ID" not in os.environ else None
    if run is None or not os.path.exists(str(path)):
        return
    import importlib.util
    import json
    import resource
    import signal
    import socket

    unbuffered, module, args = run
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        torch = importlib.util.find_spec("torch")
    except (OSError, ImportError, ValueError):
        return
    umask = os.umask(0)
    os.umask(umask)
    request = {
        "module": module, "args": args, "unbuffered": unbuffered or bool(os.environ.get("PYTHONUNBUFFERED")),
        "orig_argv": sys.orig_argv, "executable": sys.executable, "flags": list(sys.flags),
        "cwd": os.getcwd(), "env": dict(os.environ), "path": [os.getcwd(), *sys.path],
        "torch": torch.origin if torch else None, "affinity": sorted(os.sched_getaffinity(0)), "umask": umask,
        "rlimits": {name: resource.getrlimit(getattr(resource, name))
                    for name in ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE",
                                 "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_NPROC", "RLIMIT_MEMLOCK")},
        "stdout": _stream(sys.stdout), "stderr": _stream(sys.stderr), "stdin": _stream(sys.stdin),
    }
    # What this interpreter inherited: a signal ignored here (nohup's SIGHUP, an xdist worker's
    # SIGINT) stays ignored, here and in the child. The others wait, blocked, until the child's
    # pid is known: one that came before would end this process and leave the child running.
    signals = [getattr(signal, name) for name in SIGNALS]
    ignored = [int(signum) for signum in signals if signal.getsignal(signum) == signal.SIG_IGN]
    request["ignored"] = ignored
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(str(path))
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        reply = json.loads(conn.recv(4096) or b"{}")
    except (OSError, ValueError) as exc:
        reply = {"cold": repr(exc)}
    if "pid" not in reply:  # the server says cold (reply["cold"]: why), or could not answer
        if os.environ.get("WARM_TORCH_WHY"):
            print(f"warm_torch: {module} starts cold: {reply.get('cold', 'no answer')}", file=sys.stderr)
        conn.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return

    child = int(reply["pid"])

    def pass_on(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in signals:
        if signum not in ignored:
            signal.signal(signum, pass_on)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    ended = b""
    while not ended:
        try:
            ended = conn.recv(4096)
        except InterruptedError:
            continue
        if not ended:  # the server is gone: so is the child (its process group is killed)
            os._exit(1)
    code = int(json.loads(ended)["returncode"])
    if code < 0:  # killed by a signal: so is its stand-in
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


_forward()
