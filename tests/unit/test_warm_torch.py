"""The tests' warm workload processes (tests/warm_torch.py) are the processes a cold start gives:
same arguments, output, exit status, environment, directory, cores, threads and limits; their
stand-in passes signals on and ends as they do, and kill -9 of it ends them; and a process whose
start-up environment differs from the server's starts cold."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import warm_torch

# A module the shim forks warm (its name starts with workloads.): `python -m` finds it first in
# the working directory.
ECHO = '''
import json, os, resource, sys, time
import torch
if sys.argv[1] == "sleep":
    print(os.getpid(), flush=True)
    time.sleep(600)
umask = os.umask(0)
print(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "argv0": os.path.relpath(sys.argv[0]), "name": __name__,
                  "cwd": os.getcwd(), "x": os.environ.get("WARM_X"), "threads": torch.get_num_threads(),
                  "affinity": sorted(os.sched_getaffinity(0)), "stdin": sys.stdin.read(), "umask": umask,
                  "nofile": resource.getrlimit(resource.RLIMIT_NOFILE), "path0": sys.path[0],
                  "orig_argv": sys.orig_argv[1:], "unbuffered": sys.stdout.write_through}))
print("to stderr", file=sys.stderr)
sys.exit(3)
'''


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    if os.environ.get(warm_torch.COLD_ENV):  # the switch that turns the server off, asked for by name
        pytest.skip(f"{warm_torch.COLD_ENV}=1: no torch server to compare with")
    assert warm_torch.wait_ready(180), "this process's torch server did not start"
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "__init__.py").write_text("")
    (tmp_path / "workloads" / "echo.py").write_text(ECHO)
    return tmp_path


def start(workdir: Path, *args: str, env: dict[str, str], flags: tuple[str, ...] = (),
          **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *flags, "-m", "workloads.echo", *args], cwd=workdir, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]


def echo(workdir: Path, env: dict[str, str],
         flags: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], dict[str, Any], str, int]:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    proc = start(workdir, "a b", "--c", env=env, flags=flags, umask=0o027,
                 preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, limit)))
    out, err = proc.communicate("fed to stdin", timeout=120)
    return proc, json.loads(out), err, proc.returncode


@pytest.mark.parametrize("threads", ["1", None])
@pytest.mark.parametrize("flags", [(), ("-u",)])
def test_a_warm_workload_process_is_the_cold_one(workdir: Path, threads: str | None, flags: tuple[str, ...]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONUNBUFFERED")}
    env.update({"WARM_X": "42", **({"OMP_NUM_THREADS": threads} if threads else {})})
    before = warm_torch.cpu_seconds()
    warm_proc, warm, warm_err, warm_code = echo(workdir, env, flags)
    cold_proc, cold, cold_err, cold_code = echo(workdir, {**env, warm_torch.COLD_ENV: "1"}, flags)
    assert warm["pid"] != warm_proc.pid, "forked by the server, not started cold"
    assert cold["pid"] == cold_proc.pid
    assert warm_torch.cpu_seconds() > before  # the child's CPU is counted for the test
    assert (warm_code, warm_err) == (cold_code, cold_err) == (3, "to stderr\n")
    warm.pop("pid"), cold.pop("pid")
    assert warm == cold
    assert warm["argv"] == ["a b", "--c"] and warm["name"] == "__main__" and warm["x"] == "42"
    assert warm["stdin"] == "fed to stdin" and warm["umask"] == 0o027 and warm["nofile"][0] == 256
    assert warm["path0"] == str(workdir) and warm["unbuffered"] == bool(flags)
    if threads:
        assert warm["threads"] == 1


def test_a_start_up_environment_unlike_the_servers_starts_cold(workdir: Path) -> None:
    env = {**os.environ, "TORCH_SHOW_CPP_STACKTRACES": "1"}
    proc, info, _, code = echo(workdir, env)
    assert code == 3 and info["pid"] == proc.pid
    assert warm_torch.read_at_start({"TORCH_X": "1", "OMP_NUM_THREADS": "2", "OMP_PROC_BIND": "true",
                                     "PYTHONPATH": "a", "LC_ALL": "C", "WARM_X": "1",
                                     "TORCHELASTIC_RUN_ID": "r", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}) == \
        {"TORCH_X": "1", "OMP_PROC_BIND": "true", "LC_ALL": "C"}


def gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_stand_in_passes_signals_on_and_ends_as_the_child_did(workdir: Path, signum: int) -> None:
    ended = {}
    for how, env in (("warm", dict(os.environ)), ("cold", {**os.environ, warm_torch.COLD_ENV: "1"})):
        # As from a terminal: a suite started in the background (`./scripts/test.sh &`) inherits
        # SIGINT ignored, and an interpreter keeps an inherited ignore (the next test).
        proc = start(workdir, "sleep", env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert (child != proc.pid) == (how == "warm")
        proc.send_signal(signum)
        code = proc.wait(60)
        ended[how] = (code, "KeyboardInterrupt" in proc.communicate()[1])
        assert gone(child, 30)
    # SIGTERM kills the interpreter; SIGINT raises KeyboardInterrupt, which ends it by SIGINT.
    assert ended["warm"] == ended["cold"] == (-signum, signum == signal.SIGINT)


def test_a_signal_the_stand_in_inherited_ignored_stays_ignored(workdir: Path) -> None:
    """nohup's SIGHUP, say: ignored by the stand-in and its child, as by a cold interpreter."""
    for how, env in (("warm", dict(os.environ)), ("cold", {**os.environ, warm_torch.COLD_ENV: "1"})):
        proc = start(workdir, "sleep", env=env, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert (child != proc.pid) == (how == "warm")
        proc.send_signal(signal.SIGHUP)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(2)
        proc.terminate()
        assert proc.wait(60) == -signal.SIGTERM, how
        assert gone(child, 30)


def test_kill_9_of_the_stand_in_ends_the_child(workdir: Path) -> None:
    proc = start(workdir, "sleep", env=dict(os.environ))
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    proc.kill()
    assert proc.wait(60) == -signal.SIGKILL
    assert gone(child, 30), "the child outlived its stand-in"
