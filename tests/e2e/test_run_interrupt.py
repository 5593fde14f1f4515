"""A Ctrl-C of `orch run` always stops it and the jobs it started on this machine, and running
the same command again resumes the sweep (issue 30: the interrupt was lost in 2 of 17 trials)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_orch, write

NAPPING_PYTHON = """#!{python}
# Stands in for the workload's python: notes its pid, naps as long as {nap} says, then counts its
# run and writes a valid metrics file.
import json, os, sys, time
args = sys.argv[1:]
open(os.path.join({pids!r}, str(os.getpid())), "w").close()
time.sleep(float(open({nap!r}).read()))
with open("executions.log", "a") as log:
    log.write("ran\\n")
json.dump({{"schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 1,
           "device": {{"type": "cpu", "model": "host-cpu", "count": 1}}, "metrics": {{"tflops": 1.0}},
           "timing": {{"warmup_steps": 1, "timed_steps": 1}}}}, open(args[args.index("--output") + 1], "w"))
"""

SITE = """\
name: naplocal
description: the local machine with a python that naps (tests)
scheduler: local
python: {python}
device: {{type: cpu, model: host-cpu, per_node: 2, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: python}}
"""

SWEEP = """\
name: interrupted
experiments:
  - name: e
    workload: gemm
    sites: [naplocal]
    walltime: "00:10:00"
    share: true
    grid: {m: [16, 32]}
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def test_ctrl_c_stops_orch_run_and_its_local_jobs_and_a_rerun_resumes(workdir: Path) -> None:
    pids, nap = workdir / "pids", workdir / "nap"
    pids.mkdir()
    nap.write_text("300")
    fake = write(workdir / "nap-python", NAPPING_PYTHON.format(python=sys.executable, pids=str(pids), nap=str(nap)))
    fake.chmod(0o755)
    write(workdir / "sites" / "naplocal.yaml", SITE.format(python=fake))
    sweep = write(workdir / "interrupted.yaml", SWEEP)
    env = {"ORCH_SITES_PATH": str(workdir / "sites"), "ORCH_LOCAL_CORES": "4"}
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}, **env}
    # As a terminal runs it: the leader of its own process group, which a Ctrl-C signals whole.
    run = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(sweep), "--interval", "0.5"],
                           cwd=workdir, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    deadline = time.monotonic() + 300
    while len(list(pids.iterdir())) < 2:
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "the jobs never started"
        time.sleep(0.2)
    workers = [int(p.name) for p in pids.iterdir()]
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert "Traceback" not in err
    assert "stopped 2 local job(s); their runs are planned again" in err
    assert f"resume with: orch run {sweep}" in err
    assert not [pid for pid in workers if alive(pid)], "a workload process outlived the Ctrl-C"
    status = json.loads(run_orch("status", "--json", cwd=workdir, env=env, check=True).stdout)
    assert status["counts"] == {"planned": 2}
    assert not list(workdir.rglob("executions.log"))
    # The same command again resumes: both runs run (once each) to the end.
    nap.write_text("0")
    again = run_orch("run", str(sweep), "--interval", "0.5", "--json", cwd=workdir, env=env)
    assert again.returncode == 0, again.stderr
    assert sorted(r["status"] for r in json.loads(again.stdout)) == ["completed", "completed"]
    assert [p.read_text() for p in sorted(workdir.rglob("executions.log"))] == ["ran\n", "ran\n"]
    reasons = json.loads(run_orch("sql", "-f", "json", "SELECT reason FROM attempts WHERE number = 1",
                                  cwd=workdir, env=env, check=True).stdout)
    assert [r["reason"] for r in reasons] == ["interrupted (Ctrl-C of orch run): stopped, and planned again"] * 2


class _Finalizer:
    """Signals SIGINT from inside a finalizer, where Python prints and drops the KeyboardInterrupt."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # bytecode for the handler to run on, still inside __del__
            pass


def test_an_interrupt_a_finalizer_swallowed_is_raised_at_the_next_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.run import interrupt

    dropped: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: dropped.append(info.exc_type))  # "Exception ignored"
    # the handler the process started with: Python's default_int_handler, or SIG_IGN where the suite
    # was started as a background job of a non-interactive shell (which ignores SIGINT for it)
    before = signal.getsignal(signal.SIGINT)
    with interrupt.watching() as state:
        assert signal.getsignal(signal.SIGINT) == state.handler  # the block counts Ctrl-C itself
        _Finalizer()  # dropped at once: __del__ runs, the KeyboardInterrupt in it is "ignored"
        assert dropped == [KeyboardInterrupt]
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
    interrupt.check()  # outside the block nothing is pending
    assert signal.getsignal(signal.SIGINT) == before  # the block gave the process its handler back
