"""`orch follow`: a follower in its own session that finishes a campaign after the terminal is gone."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tests.conftest import run_orch, write
from tests.slurm.test_orch_on_sandbox import TRIVIAL_PYTHON

SITE = """\
name: slow
description: the local machine with a stand-in python that naps (tests)
scheduler: local
python: {python}
max_nodes: 1
device: {{type: cpu, model: host-cpu, per_node: 1, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: python}}
env: {{TRIVIAL_SLEEP: "4"}}
"""

SWEEP = """\
name: bg
experiments:
  - name: g
    workload: gemm
    sites: [slow]
    grid:
      m: [1, 2]
"""


def test_a_detached_follower_finishes_the_campaign_and_ends(workdir: Path) -> None:
    fake = write(workdir / "fake-python", TRIVIAL_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    write(workdir / "sites" / "slow.yaml", SITE.format(python=fake))
    env = {"ORCH_SITES_PATH": str(workdir / "sites")}

    def orch(*args: str, check: bool = True):
        return run_orch(*args, cwd=workdir, env=env, check=check)

    orch("plan", str(write(workdir / "s.yaml", SWEEP)))
    orch("submit")
    started = json.loads(orch("follow", "start", "--interval", "1", "--json").stdout)
    pid = started["pid"]
    assert started["running"] and "--watch" in started["command"]
    assert os.getsid(pid) == pid  # a session of its own: a closed terminal's SIGHUP never reaches it
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert "orch.db" not in cmdline  # the database URL travels in its environment, not on `ps`

    second = orch("follow", "start", check=False)  # one follower per state directory
    assert second.returncode == 2 and f"already running (pid {pid}" in second.stderr

    deadline = time.monotonic() + 240
    while json.loads(orch("follow", "status", "--json").stdout)["running"]:
        assert time.monotonic() < deadline, orch("follow", "status").stdout
        time.sleep(1)
    status = json.loads(orch("status", "--json").stdout)
    assert status["counts"] == {"finished": 2}
    log = (workdir / ".orch" / "follower.log").read_text()
    assert "follower starting" in log and "2/2 done" in log  # one line per change, not a progress bar
    stopped = json.loads(orch("follow", "stop", "--json").stdout)
    assert stopped == {"stopped": None}  # it had ended by itself


def test_follow_stop_ends_a_running_follower(workdir: Path) -> None:
    fake = write(workdir / "fake-python", TRIVIAL_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    write(workdir / "sites" / "slow.yaml", SITE.format(python=fake).replace('"4"', '"60"'))
    env = {"ORCH_SITES_PATH": str(workdir / "sites")}
    run_orch("plan", str(write(workdir / "s.yaml", SWEEP)), cwd=workdir, env=env, check=True)
    run_orch("submit", cwd=workdir, env=env, check=True)
    pid = json.loads(run_orch("follow", "start", "--interval", "1", "--json", cwd=workdir, env=env,
                              check=True).stdout)["pid"]
    stopped = json.loads(run_orch("follow", "stop", "--json", cwd=workdir, env=env, check=True).stdout)
    assert stopped == {"stopped": pid}
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
    assert not (workdir / ".orch" / "follower.json").exists()
    assert "no follower" in run_orch("follow", "stop", cwd=workdir, env=env, check=True).stdout
    run_orch("cancel", "--sweep", "bg", cwd=workdir, env=env, check=True)
    run_orch("status", "--watch", "--interval", "0.5", cwd=workdir, env=env, check=True)
