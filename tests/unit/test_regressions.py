"""Issue 51: the change-point detector on known series, and `orch regressions --fail-on` over a
real SQLite database whose epochs are written as orch writes them (runs, attempts, metrics and
environments rows), so the exit status is tested both ways without timing anything."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from orchestrator.results.db.engine import open_engine, session_factory
from orchestrator.results.db.models import Attempt, Environment, Metrics, Run, ScriptText, SweepRecord
from orchestrator.results.regressions.detect import change_points
from tests.conftest import run_orch


def _noisy(levels: list[float], noise: float = 0.01, seed: int = 3) -> list[float]:
    rng = np.random.default_rng(seed)
    return [v * float(np.exp(rng.normal(0, noise))) for v in levels]


def test_a_step_is_found_where_it_is() -> None:
    found = change_points(_noisy([100.0] * 20 + [80.0] * 10))
    assert [(c.index, round(c.magnitude, 1)) for c in found] == [(20, -0.2)]
    assert found[0].p_value < 1e-6


def test_a_clean_series_and_a_single_outlier_are_not_changes() -> None:
    assert change_points(_noisy([100.0] * 40)) == []
    series = _noisy([100.0] * 40)
    series[25] *= 0.6  # one slow node on one night
    assert change_points(series) == []


def test_too_short_a_history_has_no_change_points() -> None:
    assert change_points([100.0, 100.0, 50.0, 50.0, 50.0]) == []


def _history(db: Path, slow_from: int | None, epochs: int = 8) -> str:
    """A sweep of two configurations repeated ``epochs`` times; from ``slow_from`` the second one's
    script exports a new variable, its profile hash changes and its rate halves."""
    url = f"sqlite:///{db}"
    engine = open_engine(url)
    sessions = session_factory(engine)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with sessions.begin() as session:
        sweep = SweepRecord(name="nightly", path="nightly.yaml", content_hash="h", content="name: nightly")
        session.add(sweep)
        session.flush()
        env = Environment(content_hash="e", python="3.11", torch="2.13.0", data=json.dumps({"torch": "2.13.0"}))
        session.add(env)
        session.flush()
        for config, m in (("a", 128), ("b", 192)):
            run = Run(id=f"run{config}", sweep_id=sweep.id, sweep="nightly", experiment="x", workload="gemm",
                      site="local", status="finished", devices=1, precision="fp32", params=json.dumps({"m": m}),
                      spec="{}", walltime_s=60, epoch=epochs)
            session.add(run)
            for epoch in range(1, epochs + 1):
                slow = config == "b" and slow_from is not None and epoch >= slow_from
                script = "#!/bin/bash\n" + ("export MKL_ENABLE_INSTRUCTIONS=SSE4_2\n" if slow else "") + "run\n"
                digest = f"{config}{int(slow)}"
                if session.get(ScriptText, digest) is None:
                    session.add(ScriptText(sha256=digest, text=script))
                attempt = Attempt(run_id=run.id, number=epoch, epoch=epoch, state="completed", scheduler="local",
                                  job_name="j", node_list="localhost", script_hash=digest,
                                  profile_hash="p2" if slow else "p1", orch_version="0.1",
                                  finished_at=start + timedelta(days=epoch))
                session.add(attempt)
                session.flush()
                rate = _noisy([1.0], seed=epoch * 7 + m)[0] * (0.5 if slow else 1.0)
                session.add(Metrics(attempt_id=attempt.id, environment_id=env.id, schema="orch.metrics/v1",
                                    tflops=rate, raw="{}"))
    engine.dispose()
    return url


def test_fail_on_regression_exits_1_only_when_a_series_got_worse(tmp_path: Path) -> None:
    worse = _history(tmp_path / "worse.db", slow_from=5)
    proc = run_orch("--db", worse, "regressions", "--fail-on", "regression", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [found] = json.loads(proc.stdout)
    assert (found["series"]["params"], found["epoch_before"], found["epoch_after"], found["kind"]) == \
        ({"m": 192}, 4, 5, "regression")
    assert "profile_hash: p1 -> p2" in found["what_changed"]
    assert "script + export MKL_ENABLE_INSTRUCTIONS=SSE4_2" in found["what_changed"]
    assert [r["run_id"] for r in found["runs_after"]] == ["runb"]

    # The report draws it: the figure, its change and what changed written under it.
    page = tmp_path / "report.html"
    assert run_orch("--db", worse, "report", "-o", str(page), cwd=tmp_path).returncode == 0
    html = page.read_text()
    assert "Regression: gemm on local" in html and "change (-50" in html
    assert "what changed from epoch 4 to 5: profile_hash: p1 -&gt; p2" in html
    assert "script + export MKL_ENABLE_INSTRUCTIONS=SSE4_2" in html

    steady = _history(tmp_path / "steady.db", slow_from=None)
    proc = run_orch("--db", steady, "regressions", "--fail-on", "regression", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no change points" in proc.stdout
    # Without --fail-on a regression is reported, not failed on.
    assert run_orch("--db", worse, "regressions", cwd=tmp_path).returncode == 0


def test_the_retry_policy_counts_the_attempts_of_one_epoch() -> None:
    """An epoch's first attempt is the run's third (two epochs before it): a sweep allowing two
    attempts still retries it once, and not twice."""
    from orchestrator.states import RunState

    run = Run(retry_on='["timeout"]', max_attempts=2, epoch=3, epoch_first_attempt=3)
    assert run.status_after_failure(3, "timeout") == RunState.RETRY
    assert run.status_after_failure(4, "timeout") == RunState.FAILED
