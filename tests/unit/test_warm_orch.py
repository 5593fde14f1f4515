"""The tests' warm `orch` (tests/warm_orch.py) is the same command a cold process runs: same
output, exit status, environment and working directory, a process of its own, killed at its
timeout; and a command whose environment an interpreter reads at start-up runs cold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import warm_orch


def cold(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    # A relative database path: it resolves in the command's own working directory.
    return {**base, "COLUMNS": "200", "ORCH_DB_URL": "sqlite:///rel.db", "ORCH_HOME": str(tmp_path / "home")}


@pytest.mark.parametrize("args", [["--help"], ["sql", "SELECT 1 AS one"], ["sql", "SELECT nope"],
                                  ["plan", "missing.yaml"], ["no-such-command"]])
def test_a_warm_command_is_the_cold_one(args: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    warm = warm_orch.run(args, cwd=tmp_path, env=env, timeout=120)
    plain = cold(args, tmp_path, env)
    assert (warm.returncode, warm.stdout, warm.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert warm.args == plain.args
    if args[0] == "sql" and warm.returncode == 0:
        assert (tmp_path / "rel.db").exists()  # made where the command ran, not where the server runs


def test_each_command_has_its_own_environment_and_state(tmp_path: Path, env: dict[str, str]) -> None:
    """Two commands, two databases: the second does not reuse what the first set up (its engine,
    its settings), and the CPU it took is counted for the test."""
    before = warm_orch.cpu_seconds
    for name in ("a", "b"):
        done = warm_orch.run(["db", "upgrade"], cwd=tmp_path, env={**env, "ORCH_DB_URL": f"sqlite:///{name}.db"},
                             timeout=120)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"{name}.db").stat().st_size > 0
    assert warm_orch.cpu_seconds > before


def test_start_up_variables_and_timeouts(tmp_path: Path, env: dict[str, str]) -> None:
    # PYTHONPATH is read when an interpreter starts: that command runs cold (its CPU is then the
    # test's child's, not the server's), and still works.
    extra = tmp_path / "extra"
    extra.mkdir()
    before = warm_orch.cpu_seconds
    done = warm_orch.run(["--help"], cwd=tmp_path, env={**env, "PYTHONPATH": str(extra)}, timeout=120)
    assert done.returncode == 0 and "plan" in done.stdout
    assert warm_orch.cpu_seconds == before
    # ... and the next command, with this process's own environment, is warm again.
    assert warm_orch.run(["--help"], cwd=tmp_path, env=env, timeout=120).returncode == 0
    assert warm_orch.cpu_seconds > before
    assert warm_orch.read_at_start({"PYTHONPATH": "a", "ORCH_DB_URL": "b", "LC_ALL": "C"}) == \
        {"PYTHONPATH": "a", "LC_ALL": "C"}
    # A command past its timeout is killed, as subprocess.run kills it.
    with pytest.raises(subprocess.TimeoutExpired):
        warm_orch.run(["sql", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                              "SELECT count(*) FROM c"], cwd=tmp_path, env=env, timeout=3)


def test_the_server_loads_no_thread_runtime_so_thread_counts_stay_the_commands() -> None:
    """Thread-count variables (OMP_NUM_THREADS ...) do not send a command cold: that holds only
    while the server imports nothing that reads them when loaded (a BLAS, OpenMP, torch)."""
    probe = ("import sys\nfrom tests.warm_orch import import_warm_modules\nimport_warm_modules()\n"
             "loaded = {m.split('.')[0] for m in sys.modules}\n"
             "print(sorted(loaded & {'numpy', 'torch', 'scipy', 'matplotlib', 'threadpoolctl'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=Path(warm_orch.__file__).parents[1],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert warm_orch.read_at_start({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}) == {}
