"""Shared fixtures: an isolated orch working directory and a way to run the real CLI, and the
rules that let the suite run on several pytest-xdist workers at once (``scripts/test.sh``).

Parallel runs keep two promises:

- a test marked ``measures`` (it asserts on a time or a rate it measured) runs alone: every
  other test holds the machine shared while it runs, a measuring test holds it exclusively
  (``MachineShare``), so no two timed things ever share the cores. The other tests' local runs
  are timed too, but nothing asserts on their times: under pytest-xdist each worker's runs queue
  on a core ledger of that worker's own (``ORCH_LOCAL_CORES_DIR``, unless a test names one), so
  the workers' runs overlap instead of each waiting for the whole machine (a local run holds every
  core by default, and mostly uses one: torch's start-up is one thread);
- tests that share one stateful service or one expensive set-up run on one worker, one after
  another (``test_group``: the sandbox Slurm cluster, which some tests reconfigure as a site
  twin; a module-scoped fixture).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests import warm_torch

# Before warm_orch keeps the environment its commands are compared with: the shim that forks the
# tests' workload processes from a torch already imported is on every test process's PYTHONPATH.
warm_torch.install()

from tests import warm_orch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class MachineShare:
    """A readers-writer lock between the suite's worker processes (flock on two files).

    Ordinary tests take it shared; a ``measures`` test takes it exclusively. The turnstile makes it
    fair: a measuring test that waits holds the turnstile, so no new test starts until it has run.
    """

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self._turnstile = open(root / "turnstile", "a")  # noqa: SIM115 (held for the session)
        self._room = open(root / "room", "a")  # noqa: SIM115

    @contextmanager
    def shared(self) -> Iterator[None]:
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        fcntl.flock(self._room, fcntl.LOCK_SH)
        fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._room, fcntl.LOCK_UN)

    @contextmanager
    def alone(self) -> Iterator[None]:
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        fcntl.flock(self._room, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._room, fcntl.LOCK_UN)
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)


def _worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id (``gw0``...), or None when the suite runs in one process."""
    return getattr(config, "workerinput", {}).get("workerid")


def session_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory of this test session that every xdist worker shares: the workers' base temps
    (popen-gwN) lie in the session's; without workers it is under the base temp itself (its parent
    holds every earlier session's)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def machine_share(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> MachineShare | None:
    if _worker(request.config) is None:
        return None
    return MachineShare(session_dir(tmp_path_factory, "machine-share"))


@pytest.fixture(autouse=True)
def _share_the_machine(request: pytest.FixtureRequest, machine_share: MachineShare | None) -> Iterator[None]:
    """Hold the machine shared for an ordinary test, alone for a ``measures`` test."""
    if machine_share is None:
        yield
        return
    hold = machine_share.alone if request.node.get_closest_marker("measures") else machine_share.shared
    with hold():
        yield


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh directory to run orch in: its own .orch/ state and SQLite database."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB_URL", raising=False)
    monkeypatch.delenv("ORCH_HOME", raising=False)
    monkeypatch.delenv("ORCH_SITES_PATH", raising=False)
    return tmp_path


# This xdist worker's core ledger (the module docstring); None in a one-process run, whose local
# runs queue on the machine-wide one as a user's do.
_worker_ledger: Path | None = None


@pytest.fixture(scope="session", autouse=True)
def _warm_torch() -> None:
    """This process's torch server (tests/warm_torch.py), started in the background: the workload
    processes of its first tests start cold while it imports torch."""
    warm_torch.start()


@pytest.fixture(scope="session", autouse=True)
def _ledger_of_this_worker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
    global _worker_ledger
    if _worker(request.config) is not None:
        _worker_ledger = tmp_path_factory.getbasetemp() / "local-cores"


def run_orch(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
             check: bool = False) -> subprocess.CompletedProcess[str]:
    """``orch ARGS`` in a real process, as a user would run it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    if _worker_ledger is not None:
        full_env["ORCH_LOCAL_CORES_DIR"] = str(_worker_ledger)
    full_env.update({"COLUMNS": "200", **(env or {})})
    # A process of its own, forked from an interpreter that has imported orch's libraries
    # (tests/warm_orch.py: 0.1-0.4 s of CPU less per command).
    proc = warm_orch.run(list(args), cwd=Path(cwd), env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"orch {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(scope="session")
def pg_admin_url():
    """A real PostgreSQL server (the machine's, or one started from Debian's packages)."""
    from tests import pg

    yield from pg.server_url()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, workdir: Path):
    """Each database test runs on SQLite and on a real PostgreSQL (fresh database each time)."""
    if request.param == "sqlite":
        yield f"sqlite:///{workdir / 'orch-test.db'}"
        return
    from tests import pg

    yield from pg.fresh_database(request.getfixturevalue("pg_admin_url"))



# Under pytest 9, pytest-xdist's own --dist loadgroup (xdist_group marks) no longer groups
# anything (it renames items through an attribute pytest 9 dropped), so the suite routes tests
# itself: the controller sees node ids only, and a test's group follows from its file.
SHARED_SETUP = re.compile(r"""scope\s*=\s*["'](?:module|class|package)["']""")


@functools.cache
def _has_shared_setup(path: str) -> bool:
    """Whether a test file defines a module- or class-scoped fixture (one set-up for its tests)."""
    try:
        return bool(SHARED_SETUP.search((REPO / path).read_text()))
    except OSError:
        return False


def test_group(nodeid: str) -> str:
    """The unit of work a test belongs to: tests of one group run on one worker, in order.

    Every test under tests/slurm/ shares the one sandbox cluster (some reconfigure it as a site
    twin or restart its controller); a file with a module-scoped set-up is one group, so it is paid
    once; any other test is a group of its own."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/slurm/"):
        return "tests/slurm"
    return path if _has_shared_setup(path) else nodeid


@pytest.hookimpl(optionalhook=True)  # xdist's hook: `pytest -p no:xdist` runs without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` (scripts/test.sh): xdist's scope scheduler over ``test_group``; the
    largest groups (the sandbox cluster's) start first."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return test_group(nodeid)

    return GroupScheduling(config, log)


class _FixtureTimes:
    """With ORCH_TEST_FIXTURE_TIMES=FILE, one JSON line per fixture set-up (name, scope, seconds,
    test): benchmarks/suite_times.py sums them, so the suite's set-up costs are known, not guessed.
    A plugin, not a conftest hook: a conftest's hooks do not see session-scoped set-ups."""

    def __init__(self, path: str) -> None:
        self.path = path

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> Iterator[None]:
        began = time.perf_counter()
        yield
        line = json.dumps({"fixture": fixturedef.argname, "scope": fixturedef.scope,
                           "seconds": round(time.perf_counter() - began, 3), "test": request.node.nodeid})
        with open(self.path, "a") as out:  # one short append per line: whole lines even from several workers
            out.write(line + "\n")


class _TestCpu:
    """With ORCH_TEST_CPU_TIMES=FILE, one JSON line per test: wall seconds, this worker's CPU
    seconds and its reaped children's (every ``orch`` command and run the test waited for), so
    the suite's use of the cores is known per test. The machine's two cores bound a parallel
    suite: the sum of these, not of wall times, says how short it can be. Jobs started by the
    sandbox's slurmd are its children, not the test's, and are not counted here."""

    def __init__(self, path: str) -> None:
        self.path = path

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        import resource

        def cpu(who: int) -> float:
            usage = resource.getrusage(who)
            return usage.ru_utime + usage.ru_stime

        def children() -> float:  # the commands and workloads run warm are not this process's children
            return cpu(resource.RUSAGE_CHILDREN) + warm_orch.cpu_seconds + warm_torch.cpu_seconds()

        began = time.time()  # when, and on which worker: the suite's timeline (who waited on whom)
        wall, own, before = time.perf_counter(), cpu(resource.RUSAGE_SELF), children()
        yield
        line = json.dumps({"test": item.nodeid, "group": test_group(item.nodeid),
                           "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                           "start": round(began, 3), "end": round(time.time(), 3),
                           "wall": round(time.perf_counter() - wall, 3),
                           "cpu_self": round(cpu(resource.RUSAGE_SELF) - own, 3),
                           "cpu_children": round(children() - before, 3)})
        with open(self.path, "a") as out:
            out.write(line + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("ORCH_TEST_CPU_TIMES"):
        config.pluginmanager.register(_TestCpu(os.environ["ORCH_TEST_CPU_TIMES"]), "orch-test-cpu")
    if os.environ.get("ORCH_TEST_FIXTURE_TIMES"):
        config.pluginmanager.register(_FixtureTimes(os.environ["ORCH_TEST_FIXTURE_TIMES"]), "orch-fixture-times")
