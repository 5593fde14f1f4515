"""The report's loss_curve figure: loss against step per run group, from metric_series (migration 0014)."""

from __future__ import annotations

from pathlib import Path

import pytest

GOOD = {
    "schema": "orch.metrics/1", "workload": "gpt2", "precision": "fp32", "world_size": 1,
    "device": {"type": "cpu", "model": "host-cpu", "count": 1},
    "metrics": {"tokens_per_s": 100.0, "loss": 9.0},
    "timing": {"warmup_steps": 1, "timed_steps": 2, "step_times_s": [0.1, 0.1]},
}


def _database(tmp_path: Path, losses: dict[tuple[str, str, int], list[float]]):  # type: ignore[no-untyped-def]
    """Runs (id, site, repeat) of one gpt2 sweep, each with a loss series at steps 1..n."""
    from orchestrator.results.db.engine import open_database
    from orchestrator.results.db.models import Attempt, Run, SweepRecord
    from orchestrator.results.db.results import record_results
    from orchestrator.results.ingest import store_metrics_many
    from orchestrator.results.metrics_schema import MetricsFile

    sessions = open_database(f"sqlite:///{tmp_path / 'orch.db'}")
    with sessions.begin() as session:
        sweep = SweepRecord(name="loss", path="/s.yaml", content_hash="h", content="name: loss")
        session.add(sweep)
        session.flush()
        for (run_id, site, repeat), values in losses.items():
            session.add(Run(id=run_id, sweep_id=sweep.id, sweep="loss", experiment="e", workload="gpt2", site=site,
                            status="finished", devices=1, precision="fp32", repeat=repeat,
                            params='{"model": "tiny"}', spec="{}", walltime_s=60, max_attempts=1, retry_on="[]"))
            session.flush()
            attempt = Attempt(run_id=run_id, number=1, state="completed", scheduler="local", job_name=run_id)
            session.add(attempt)
            session.flush()
            series = {"loss": {"every": 1, "steps": list(range(1, len(values) + 1)), "values": values}}
            store_metrics_many(session, [(attempt.id, MetricsFile.model_validate({**GOOD, "series": series}))])
            record_results(session, [attempt.id])
    return sessions.kw["bind"]


def test_one_line_per_run_group_with_the_mean_over_repeats(tmp_path: Path) -> None:
    from orchestrator.results.report import draw
    from orchestrator.results.report.curves import loss_curve
    from orchestrator.results.report.model import FigureData
    from orchestrator.results.report.source import Source

    engine = _database(tmp_path, {("a1", "local", 0): [10.0, 8.0, 6.0], ("a2", "local", 1): [12.0, 10.0, 8.0],
                                  ("b1", "polaris", 0): [11.0, 7.0]})
    data = loss_curve(Source(engine))
    assert isinstance(data, FigureData) and [p.title for p in data.panels] == ["gpt2 tiny"]
    lines = {s.label.split(" ")[0]: s for s in data.panels[0].series}
    assert set(lines) == {"local", "polaris"}
    local = lines["local"].points
    assert [(p.x, p.y, p.lo, p.hi) for p in local] == [(1, 11.0, 10.0, 12.0), (2, 9.0, 8.0, 10.0),
                                                        (3, 7.0, 6.0, 8.0)]
    assert {p.run_id for p in local} == {"a1"}  # a point links to the group's first run
    assert [(p.x, p.y, p.lo) for p in lines["polaris"].points] == [(1, 11.0, None), (2, 7.0, None)]
    rows = {r["run_id"]: r for r in data.table.rows}
    assert rows["a1"]["runs"] == 2 and rows["a1"]["last_loss"] == pytest.approx(7.0)
    figure = draw.render(data)  # matplotlib Agg: it draws
    assert "<svg" in draw.svg_text(figure)


def test_skipped_without_a_loss_series(tmp_path: Path) -> None:
    from orchestrator.results.report.curves import loss_curve
    from orchestrator.results.report.model import Skip
    from orchestrator.results.report.source import Source

    result = loss_curve(Source(_database(tmp_path, {})))
    assert isinstance(result, Skip) and "per-step loss" in result.reason


def test_the_report_lists_the_figure() -> None:
    from orchestrator.results.report.figures import BUILDERS

    assert "loss_curve" in BUILDERS
