"""Metrics files: what validates, and the reason given for each kind of bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.ingest import read_metrics

GOOD = {
    "schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 2,
    "device": {"type": "cpu", "model": "host-cpu", "count": 2},
    "metrics": {"tflops": 1.5, "step_time_s": 0.01, "mfu": None},
    "timing": {"warmup_steps": 2, "timed_steps": 5, "step_times_s": [0.01] * 5},
    "env": {"python": "3.11", "torch": "2.13.0"},
}


def write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "metrics.json"
    path.write_text(content)
    return path


def test_good_file_validates(tmp_path: Path) -> None:
    metrics, outcome = read_metrics(write(tmp_path, json.dumps(GOOD)))
    assert outcome.ok and metrics is not None and metrics.headline()["tflops"] == 1.5


@pytest.mark.parametrize("content, expected", [
    (json.dumps(GOOD)[:40], "not valid JSON"),
    (json.dumps({**GOOD, "world_size": "two"}), "world_size"),
    (json.dumps({**GOOD, "metrics": {"tflops": "fast"}}), "metrics.tflops"),
    (json.dumps(GOOD).replace("1.5", "NaN"), "NaN is not a number"),
    (json.dumps({**GOOD, "metrics": {"tflops": -1.0}}), "negative"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "device"}), "device: required"),
    (json.dumps({**GOOD, "schema": "orch.metrics/99"}), "schema"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_files_are_refused_with_a_reason(tmp_path: Path, content: str, expected: str) -> None:
    metrics, outcome = read_metrics(write(tmp_path, content))
    assert metrics is None and outcome.failure == "bad_metrics"
    assert expected.split(":")[0] in (outcome.reason or "")


def test_missing_file(tmp_path: Path) -> None:
    metrics, outcome = read_metrics(tmp_path / "metrics.json")
    assert metrics is None and outcome.failure == "missing_metrics"
