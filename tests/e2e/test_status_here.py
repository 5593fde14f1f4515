"""`orch status` run from a folder with no campaign says so and creates nothing (issue 27: it
made an empty .orch/ and reported "total 0", as if the campaign had vanished)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write


def test_status_where_no_database_is_says_so_and_creates_nothing(workdir: Path) -> None:
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    proc = run_orch("status", cwd=elsewhere)
    assert proc.returncode == 0 and not proc.stdout
    assert proc.stderr.startswith(f"no orch database here ({elsewhere}/.orch/orch.db does not exist)"), proc.stderr
    assert not (elsewhere / ".orch").exists()
    listed = json.loads(run_orch("status", "--failed", "--json", cwd=elsewhere, check=True).stdout)
    assert listed == {"counts": {}, "total": 0, "polls": 0, "scheduler_calls": {}, "database": None, "runs": []}
    assert not (elsewhere / ".orch").exists()


def test_status_lists_skipped_runs_with_their_reasons(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", "name: s\nexperiments:\n  - name: e\n    workload: gemm\n    sites: [local]\n"
                                      "    walltime: 10\n    grid: {m: 32, precision: [fp32, fp8]}\n")
    run_orch("plan", str(sweep), cwd=workdir, check=True)
    proc = run_orch("status", "--skipped", "--json", cwd=workdir, check=True)
    [run] = json.loads(proc.stdout)["runs"]
    assert run["status"] == "skipped" and "fp8" in run["reason"] and run["log"] is None and run["attempt"] is None
    assert json.loads(run_orch("status", "--json", cwd=workdir, check=True).stdout)["counts"] == {
        "planned": 1, "skipped": 1}


def test_read_commands_where_no_database_is_refuse_and_create_nothing(workdir: Path) -> None:
    # Issue 27: `orch sql`, `orch export` and `orch report` made an empty .orch/ as status did.
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    for args in (("sql", "SELECT 1"), ("export",), ("report", "--output", "r.html")):
        proc = run_orch(*args, cwd=elsewhere)
        assert proc.returncode == 2 and not proc.stdout, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith(f"error: no orch database here ({elsewhere}/.orch/orch.db does not exist)"), \
            proc.stderr
        assert "Traceback" not in proc.stderr
        assert not (elsewhere / ".orch").exists() and not (elsewhere / "r.html").exists()
    # A database named on purpose is opened (and made) as before: --db, $ORCH_DB_URL, $ORCH_HOME.
    named = run_orch("--db", f"sqlite:///{elsewhere / 'named.db'}", "sql", "SELECT 1 AS one", "-f", "json",
                     cwd=elsewhere, check=True)
    assert json.loads(named.stdout) == [{"one": 1}] and (elsewhere / "named.db").exists()
    by_env = run_orch("export", "--view", "runs", cwd=elsewhere, env={"ORCH_DB_URL": f"sqlite:///{elsewhere / 'e.db'}"},
                      check=True)
    assert by_env.returncode == 0 and (elsewhere / "e.db").exists()
    run_orch("sql", "SELECT 1", cwd=elsewhere, env={"ORCH_HOME": str(elsewhere / "home")}, check=True)
    assert (elsewhere / "home" / "orch.db").exists() and not (elsewhere / ".orch").exists()
