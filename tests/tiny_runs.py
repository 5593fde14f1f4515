"""Each example's tiny variant, run once per test session and shared by every test that reads it.

``tests/e2e/test_examples.py`` runs every example's tiny variant; ``test_inference.py`` and
``test_serving.py`` read D3's and D4's. Under pytest-xdist those files may land on different
workers, so the outcome is kept in a directory of the session every worker shares (as the
machine-share locks are): the first test to ask runs ``orch plan``, ``orch run`` and ``orch sql``
in a working directory of its own, under a per-example lock; every later one, on any worker, waits
for that lock and reads what it left. A reader never writes to the directory (``orch sql``;
``orch report -o`` to a folder of its own).
"""

from __future__ import annotations

import fcntl
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_orch, session_dir

EXAMPLES = REPO / "examples"
# One torch thread per process: several runs share this machine's two cores.
ENV = {"OMP_NUM_THREADS": "1"}
RESULTS_QUERY = ("SELECT sweep, experiment, workload, site, devices, status, failure_class, tokens_per_s, "
                 "samples_per_s, tflops, bandwidth_gbs, peak_mem_gb FROM results")


@dataclass
class TinyRun:
    """An example's tiny variant after ``orch run``: where it ran and what the three commands said."""

    workdir: Path
    plan: dict[str, Any]  # `orch plan --variant tiny --dry-run --json`
    returncode: int  # `orch run --variant tiny`
    stdout: str
    stderr: str
    rows: list[dict[str, Any]]  # RESULTS_QUERY over the results view


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for the whole session, every worker's (tests/conftest.py's session_dir)."""
    return session_dir(tmp_path_factory, "tiny-runs")


def _run(workdir: Path, example: str) -> dict[str, Any]:
    path = str(EXAMPLES / example)
    plan = run_orch("plan", path, "--variant", "tiny", "--dry-run", "--json", cwd=workdir, env=ENV, check=True)
    # The run may wait long for cores: exclusive local runs queue on the machine-wide ledger behind
    # every worker's runs (CI's A3 once waited past 8 minutes). Each tiny run has its own 5-minute
    # walltime, so a hung run still ends; this limit only ends a hung `orch run`.
    run = run_orch("run", path, "--variant", "tiny", "--interval", "0.5", cwd=workdir, env=ENV, timeout=1800)
    rows = run_orch("sql", "--format", "json", RESULTS_QUERY, cwd=workdir, env=ENV, check=True)
    return {"plan": json.loads(plan.stdout), "returncode": run.returncode, "stdout": run.stdout,
            "stderr": run.stderr, "rows": json.loads(rows.stdout)}


def tiny_run(root: Path, example: str) -> TinyRun:
    """``example``'s tiny variant under ``root`` (shared_root), run now unless a test has run it."""
    name = example.removesuffix(".yaml")
    workdir, outcome = root / name, root / f"{name}.json"
    with open(root / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when a run raises
        if not outcome.exists():
            workdir.mkdir(exist_ok=True)
            outcome.write_text(json.dumps(_run(workdir, example)))
    return TinyRun(workdir=workdir, **json.loads(outcome.read_text()))
