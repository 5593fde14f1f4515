"""A Ctrl-C of `orch submit` does not reach the local jobs it started: like a real scheduler's
jobs, they run on and are followed to the end by a later `orch status`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_orch, write

SLOW_PYTHON = """#!{python}
# Stands in for the workload's python: naps, counts its runs, writes a valid metrics file.
import json, sys, time
args = sys.argv[1:]
time.sleep(4)
with open("executions.log", "a") as log:
    log.write("ran\\n")
json.dump({{"schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 1,
           "device": {{"type": "cpu", "model": "host-cpu", "count": 1}}, "metrics": {{"tflops": 1.0}},
           "timing": {{"warmup_steps": 1, "timed_steps": 1}}}}, open(args[args.index("--output") + 1], "w"))
"""

SITE = """\
name: slowlocal
description: the local machine with a python that naps (tests)
scheduler: local
python: {python}
device: {{type: cpu, model: host-cpu, per_node: 2, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: python}}
"""

SWEEP = """\
name: interrupt
experiments:
  - name: e
    workload: gemm
    sites: [slowlocal]
    walltime: "00:10:00"
    share: true
    grid: {m: [16, 32]}
"""


def test_sigint_to_the_submitters_process_group_leaves_local_jobs_running(workdir: Path) -> None:
    fake = write(workdir / "slow-python", SLOW_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    write(workdir / "sites" / "slowlocal.yaml", SITE.format(python=fake))
    env = {"ORCH_SITES_PATH": str(workdir / "sites"), "ORCH_LOCAL_CORES": "4"}
    run_orch("plan", str(write(workdir / "interrupt.yaml", SWEEP)), cwd=workdir, env=env, check=True)
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}, **env}
    # `orch submit` as a terminal runs it: the leader of its own process group. A Ctrl-C goes to
    # that whole group; sent once the jobs are started (the submit has returned), it reaches
    # every process still in the group, i.e. any job controller that shares it.
    submit = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "submit"], cwd=workdir, env=full,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    assert submit.wait(timeout=600) == 0
    try:
        os.killpg(submit.pid, signal.SIGINT)
    except ProcessLookupError:
        pass  # nothing left in the group: the jobs are in sessions of their own
    status = json.loads(run_orch("status", "--watch", "--interval", "0.5", "--json", cwd=workdir, env=env,
                                 check=True).stdout)
    assert status["counts"] == {"finished": 2}
    attempts = json.loads(run_orch("sql", "-f", "json", "SELECT run_id, count(*) AS n FROM attempts GROUP BY run_id",
                                   cwd=workdir, env=env, check=True).stdout)
    assert [a["n"] for a in attempts] == [1, 1]
    logs = sorted(workdir.rglob("executions.log"))
    assert [p.read_text() for p in logs] == ["ran\n", "ran\n"]
