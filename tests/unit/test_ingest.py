"""Metrics files: what validates, and the reason given for each kind of bad file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.results.ingest import read_metrics

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


def test_collecting_the_same_metrics_twice_changes_nothing(db_url: str) -> None:
    """On SQLite and PostgreSQL: a second ingest of the same attempt adds no row and no environment."""
    from sqlalchemy import func, select

    from orchestrator.results.db.engine import open_database
    from orchestrator.results.db.models import Attempt, Environment, Metrics, Run, SweepRecord
    from orchestrator.results.ingest import store_metrics_many
    from orchestrator.results.metrics_schema import MetricsFile

    sessions = open_database(db_url)
    metrics = MetricsFile.model_validate(GOOD)
    with sessions.begin() as session:
        sweep = SweepRecord(name="s", path="/s.yaml", content_hash="h", content="name: s")
        session.add(sweep)
        session.flush()
        session.add(Run(id="r1", sweep_id=sweep.id, sweep="s", experiment="e", workload="gemm", site="local",
                        status="finished", devices=2, precision="fp32", repeat=0, params="{}", spec="{}",
                        walltime_s=60, max_attempts=1, retry_on="[]"))
        session.flush()
        attempts = [Attempt(run_id="r1", number=n, state="completed", scheduler="local", job_name=f"j{n}")
                    for n in (1, 2)]
        session.add_all(attempts)
        session.flush()
        ids = [a.id for a in attempts]
    for _ in range(2):
        with sessions.begin() as session:
            store_metrics_many(session, [(i, metrics) for i in ids])
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Metrics)) == 2
        assert session.scalar(select(func.count()).select_from(Environment)) == 1
        assert session.scalar(select(Metrics.tflops).where(Metrics.attempt_id == ids[0])) == 1.5


LOSS = {"every": 2, "steps": [2, 4, 6], "values": [10.5, 9.25, 8.0]}


def test_a_loss_series_is_stored_point_by_point(db_url: str) -> None:
    """On SQLite and PostgreSQL: series.loss becomes one metric_series row per step, once."""
    from sqlalchemy import text

    from orchestrator.results.db.engine import open_database
    from orchestrator.results.db.models import Attempt, Run, SweepRecord
    from orchestrator.results.ingest import store_metrics_many
    from orchestrator.results.metrics_schema import MetricsFile

    sessions = open_database(db_url)
    metrics = MetricsFile.model_validate({**GOOD, "series": {"loss": LOSS}})
    with sessions.begin() as session:
        sweep = SweepRecord(name="s", path="/s.yaml", content_hash="h", content="name: s")
        session.add(sweep)
        session.flush()
        session.add(Run(id="r1", sweep_id=sweep.id, sweep="s", experiment="e", workload="gpt2", site="local",
                        status="finished", devices=2, precision="fp32", repeat=0, params="{}", spec="{}",
                        walltime_s=60, max_attempts=1, retry_on="[]"))
        session.flush()
        attempt = Attempt(run_id="r1", number=1, state="completed", scheduler="local", job_name="j1")
        session.add(attempt)
        session.flush()
        attempt_id = attempt.id
    for _ in range(2):
        with sessions.begin() as session:
            store_metrics_many(session, [(attempt_id, metrics)])
    with sessions() as session:
        rows = session.execute(text("SELECT attempt_id, name, step, value FROM metric_series ORDER BY step")).all()
    assert [tuple(r) for r in rows] == [(attempt_id, "loss", 2, 10.5), (attempt_id, "loss", 4, 9.25),
                                        (attempt_id, "loss", 6, 8.0)]


@pytest.mark.parametrize("series, expected", [
    ({"loss": {**LOSS, "values": [1.0]}}, "3 steps but 1 values"),
    ({"loss": {**LOSS, "steps": [2, 2, 6]}}, "step numbers must increase"),
    ({"loss": {**LOSS, "values": [1.0, 2.0, 1e200]}}, "beyond 1e+60"),
    ({"loss": {**LOSS, "every": 0}}, "every"),
    ({"loss": [1.0, 2.0]}, "series.loss"),
])
def test_bad_series_are_refused_with_a_reason(tmp_path: Path, series: dict[str, Any], expected: str) -> None:
    metrics, outcome = read_metrics(write(tmp_path, json.dumps({**GOOD, "series": series})))
    assert metrics is None and outcome.failure == "bad_metrics"
    assert expected in (outcome.reason or ""), outcome.reason


def test_a_series_name_that_does_not_fit_its_column() -> None:
    from orchestrator.results.ingest import storage_problem
    from orchestrator.results.metrics_schema import MetricsFile

    assert storage_problem(MetricsFile.model_validate({**GOOD, "series": {"loss": LOSS}})) is None
    problem = storage_problem(MetricsFile.model_validate({**GOOD, "series": {"lo\x00ss": LOSS}}))
    assert problem is not None and "series: the name" in problem and "NUL" in problem


@pytest.mark.parametrize("change, expected", [
    (lambda doc: doc["device"].update(model="m" * 201), "device.model: 201 characters, over the 200"),
    (lambda doc: doc["env"].update(python="3" * 51), "env.python: 51 characters, over the 50"),
    (lambda doc: doc.update(env={"git_rev": "a" * 81}), "env.git_rev: 81 characters, over the 80"),
    (lambda doc: doc["metrics"].update({"n" * 101: 1.0}), "101 characters, over the 100"),
    (lambda doc: doc["env"].update(hostname="h\x00"), "env.hostname: contains a NUL character"),
    (lambda doc: doc.update(world_size=2**31), "world_size: 2147483648 is beyond the 32-bit integers"),
])
def test_values_that_do_not_fit_their_columns(change: Callable[[dict[str, Any]], None], expected: str) -> None:
    from orchestrator.results.ingest import storage_problem
    from orchestrator.results.metrics_schema import MetricsFile

    doc = json.loads(json.dumps(GOOD))
    assert storage_problem(MetricsFile.model_validate(doc)) is None
    change(doc)
    problem = storage_problem(MetricsFile.model_validate(doc))
    assert problem is not None and expected in problem, problem


def test_a_metric_whose_square_overflows_is_refused(tmp_path: Path) -> None:
    metrics, outcome = read_metrics(write(tmp_path, json.dumps({**GOOD, "metrics": {"tflops": 1e308}})))
    assert metrics is None and outcome.reason is not None and "beyond 1e+60" in outcome.reason


def test_hard_links_and_linked_run_folders_are_refused(tmp_path: Path) -> None:
    from orchestrator.results.ingest import load_metrics

    other = tmp_path / "runs" / "sweep" / "other"
    other.mkdir(parents=True)
    (other / "metrics.json").write_text(json.dumps(GOOD))
    linked = tmp_path / "runs" / "sweep" / "hardlinked"
    linked.mkdir()
    (linked / "metrics.json").hardlink_to(other / "metrics.json")
    assert "2 hard links" in str(load_metrics(linked / "metrics.json", 2)[1].reason)
    (other / "metrics.json").unlink()
    (other / "metrics.json").write_text(json.dumps(GOOD))
    (tmp_path / "runs" / "sweep" / "symlinked").symlink_to(other)
    assert "'symlinked' is a symbolic link" in str(load_metrics(tmp_path / "runs" / "sweep" / "symlinked" /
                                                               "metrics.json", 2)[1].reason)
    assert load_metrics(other / "metrics.json", 2)[1].ok
