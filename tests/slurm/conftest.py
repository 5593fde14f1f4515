"""Fixtures for the tests against the real sandbox Slurm cluster.

The ``cluster`` fixture brings the cluster up (``orchestrator.sites.sandbox.up``) once per
session and FAILS the tests that need it when it cannot: a Slurm that does not
come up is a broken test environment, never a reason to skip.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterable

import pytest

from orchestrator.run.executors.base import JobInfo, JobRequest
from orchestrator.run.executors.slurm import SlurmExecutor

HERE = Path(__file__).parent


def up_again(**kwargs):
    """``sandbox.up(**kwargs)`` on a cluster already up as asked: asserts it took the fast path, by
    what it did rather than how long (a busy machine once made a 5 s limit fail an idempotent call):
    every daemon keeps its process (controller, accounting, munge, each node's slurmd) and no file
    under /etc/slurm is rewritten."""
    from orchestrator.sites import sandbox
    from orchestrator.sites.sandbox.daemons import _running_slurmd_nodes, _slurmd_pidfile
    from orchestrator.sites.sandbox.facts import CONF_DIR, CTLD_PID, DBD_PID, MUNGE_PID
    from orchestrator.sites.sandbox.proc import _pid_alive

    def daemons() -> dict[str, int | None]:
        found = {"slurmctld": _pid_alive(CTLD_PID, "slurmctld"), "slurmdbd": _pid_alive(DBD_PID, "slurmdbd"),
                 "munged": _pid_alive(MUNGE_PID, "munged")}
        for node in _running_slurmd_nodes():
            found[f"slurmd-{node}"] = _pid_alive(_slurmd_pidfile(node), "slurmd")
        return found

    def configs() -> dict[str, int]:
        return {str(f): f.stat().st_mtime_ns for f in sorted(CONF_DIR.rglob("*")) if f.is_file()}

    before, written = daemons(), configs()
    assert all(before.values()) and any(k.startswith("slurmd-") for k in before), \
        f"the cluster is not fully up before up() again: {before}"
    st = sandbox.up(**kwargs)
    assert daemons() == before, f"up() again restarted a daemon: {before} -> {daemons()}"
    assert configs() == written, "up() again rewrote a configuration file under /etc/slurm"
    return st


def pytest_collection_modifyitems(config, items):
    # Under pytest-xdist every test here runs on one worker, in order (tests/conftest.py's test_group).
    for item in items:
        if HERE in Path(str(item.fspath)).parents and "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)


@pytest.fixture(scope="session")
def cluster():
    from orchestrator.sites import sandbox

    if os.geteuid() != 0:
        pytest.fail("the Slurm sandbox tests need root (sandbox.up installs and starts daemons)")
    try:
        st = sandbox.up()
    except sandbox.SandboxError as e:
        pytest.fail(f"the sandbox Slurm cluster could not be brought up:\n{e}", pytrace=False)
    if not st.ok:
        pytest.fail(f"sandbox.up() returned a cluster that is not ok: {st.as_dict()}", pytrace=False)
    return st


@pytest.fixture(scope="session")
def slurm_root(tmp_path_factory) -> Path:
    # Run directories must be visible to slurmd: all nodes are this host, so /tmp works.
    return tmp_path_factory.mktemp("slurm")


def make_request(root: Path, name: str, body: str, directives: Iterable[str] = (), *,
                 shape_key: str = "", attempt: int = 1, walltime_s: int = 120,
                 nodes: int = 1, tasks_per_node: int = 1) -> JobRequest:
    """Write a tiny rendered script under root/name/ and return its JobRequest."""
    run_dir = root / name
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {d}" for d in directives]
    lines.append(f"#SBATCH --output={run_dir}/slurm-%j.out")
    lines.append(body)
    script = run_dir / "job.sh"
    script.write_text("\n".join(lines) + "\n")
    return JobRequest(
        run_id=name,
        attempt=attempt,
        script_path=script,
        run_dir=run_dir,
        job_name=f"orch-{name}-a{attempt}",
        walltime_s=walltime_s,
        nodes=nodes,
        tasks_per_node=tasks_per_node,
        shape_key=shape_key,
    )


def wait_ended(ex: SlurmExecutor, ids: list[str], timeout: float = 120, interval: float = 1.0,
               unknown_grace: float = 30) -> dict[str, JobInfo]:
    """Follow jobs with ``query`` until all have ended; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    start = time.monotonic()
    infos: dict[str, JobInfo] = {}
    while time.monotonic() < deadline:
        infos = ex.query(ids)
        if all(i.ended for i in infos.values()):
            return infos
        stuck = [i for i in infos.values() if i.state.value == "unknown"]
        if stuck and time.monotonic() - start > unknown_grace:
            pytest.fail(f"jobs still unknown to Slurm after {unknown_grace}s: {stuck}")
        time.sleep(interval)
    pytest.fail(f"jobs did not end within {timeout}s: " + ", ".join(f"{k}={v.state.value}" for k, v in infos.items()))


def wait_state(ex: SlurmExecutor, job_id: str, states: set[str], timeout: float = 60) -> JobInfo:
    deadline = time.monotonic() + timeout
    info = None
    while time.monotonic() < deadline:
        info = ex.query([job_id])[job_id]
        if info.state.value in states:
            return info
        time.sleep(0.5)
    pytest.fail(f"job {job_id} never reached {states}: {info}")


@pytest.fixture(scope="session")
def new_request():
    """Factory: new_request(root, name, body, directives=(), **JobRequest fields)."""
    return make_request


@pytest.fixture(scope="session")
def follow():
    """follow(ex, ids, timeout=...) -> infos once every job has ended."""
    return wait_ended


@pytest.fixture(scope="session")
def reach():
    """reach(ex, job_id, {"running"}, timeout=...) -> info once the job is in one of the states."""
    return wait_state
