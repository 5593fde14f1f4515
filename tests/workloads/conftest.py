"""Fixtures of the workload tests: each workload runs as a real process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.workloads.workload_helpers import load_valid, run_module, undocumented


@pytest.fixture
def run_workload(tmp_path: Path):
    """Run a workload module with --output in tmp_path; return its validated metrics document
    (whose every metric name must be in db/glossary_metrics.yaml)."""

    def _run(module: str, args: list[str], *, nproc: int = 1, timeout: float = 180) -> dict[str, Any]:
        out = tmp_path / f"{module.rsplit('.', 1)[-1]}-{nproc}.json"
        run_module(module, [*args, "--output", str(out)], nproc=nproc, timeout=timeout)
        doc = load_valid(out)
        missing = undocumented(doc["metrics"])
        assert not missing, f"{module} writes metrics db/glossary_metrics.yaml lacks: {missing}"
        return doc

    return _run
