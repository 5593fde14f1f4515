"""Collecting many attempts' metrics at once (what one poll of `orch status` does), on SQLite and
PostgreSQL: each file judged on its own, the good ones stored by the drivers' bulk paths exactly
as the ORM would store them, and a second collection adding nothing."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from orchestrator.results.db.bulk import insert_rows
from orchestrator.results.db.engine import open_database
from orchestrator.results.db.models import Attempt, Environment, Metrics, MetricValue, Run, SweepRecord
from orchestrator.results.db.results import record_results
from orchestrator.results.ingest import collect

GOOD: dict[str, Any] = {
    "schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 2,
    "device": {"type": "cpu", "model": "host-cpu", "count": 2},
    "metrics": {"tflops": 1.5, "step_time_s": 0.01, "mfu": None, "fwd_time_s": 0.004},
    "timing": {"warmup_steps": 2, "timed_steps": 5, "step_times_s": [0.01] * 5},
    "env": {"python": "3.11", "torch": "2.13.0", "git_rev": "abc123"},
}


def _attempts(sessions, count: int) -> list[int]:
    with sessions.begin() as session:
        sweep = SweepRecord(name="s", path="/s.yaml", content_hash="h", content="name: s")
        session.add(sweep)
        session.flush()
        for i in range(count):
            session.add(Run(id=f"r{i}", sweep_id=sweep.id, sweep="s", experiment="e", workload="gemm",
                            site="local", status="running", devices=2, precision="fp32", repeat=0, params="{}",
                            spec="{}", walltime_s=60, max_attempts=1, retry_on="[]"))
        session.flush()
        attempts = [Attempt(run_id=f"r{i}", number=1, state="completed", scheduler="local", job_name=f"j{i}")
                    for i in range(count)]
        session.add_all(attempts)
        session.flush()
        return [a.id for a in attempts]


def test_a_batch_stores_the_good_files_and_refuses_each_bad_one_with_its_reason(db_url: str, tmp_path: Path) -> None:
    sessions = open_database(db_url)
    ids = _attempts(sessions, 6)
    contents = {
        "good-a": json.dumps(GOOD),
        "truncated": json.dumps(GOOD)[:50],
        "nan": json.dumps(GOOD).replace("1.5", "NaN"),
        "wrong-type": json.dumps({**GOOD, "world_size": "two"}),
        "good-b": json.dumps({**GOOD, "metrics": {"tflops": 3.0}}),
    }
    files = []
    for attempt_id, (name, text) in zip(ids, contents.items()):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(text)
        files.append((attempt_id, tmp_path / name / "metrics.json"))
    files.append((ids[5], tmp_path / "never-written" / "metrics.json"))

    with sessions.begin() as session:
        outcomes = collect(session, files)
        record_results(session, ids)

    assert [outcomes[i].ok for i in ids] == [True, False, False, False, True, False]
    assert "not valid JSON" in (outcomes[ids[1]].reason or "")
    assert "NaN is not a number" in (outcomes[ids[2]].reason or "")
    assert "world_size" in (outcomes[ids[3]].reason or "")
    assert outcomes[ids[5]].failure == "missing_metrics"
    assert {outcomes[i].failure for i in ids[1:4]} == {"bad_metrics"}
    with sessions() as session:
        stored = dict(session.execute(sa.select(Metrics.attempt_id, Metrics.tflops)).all())
        assert stored == {ids[0]: 1.5, ids[4]: 3.0}
        values = session.execute(sa.select(MetricValue.attempt_id, MetricValue.name, MetricValue.value)
                                 .order_by(MetricValue.attempt_id, MetricValue.name)).all()
        # Every reported number (headline or not), nulls left out.
        assert [tuple(v) for v in values] == [(ids[0], "fwd_time_s", 0.004), (ids[0], "step_time_s", 0.01),
                                              (ids[0], "tflops", 1.5), (ids[4], "tflops", 3.0)]
        row = session.scalars(sa.select(Metrics).where(Metrics.attempt_id == ids[0])).one()
        assert json.loads(row.raw) == GOOD  # the document as the workload wrote it
        assert row.code_revision == "abc123" and row.device_model == "host-cpu" and row.world_size == 2
        assert row.ingested_at is not None
        assert session.scalar(sa.select(sa.func.count()).select_from(Environment)) == 1
        results: dict[str, float] = dict(session.execute(sa.text("SELECT run_id, tflops FROM results")).all())
        assert results["r0"] == 1.5 and results["r4"] == 3.0

    # Collecting the same attempts again (a second `orch status`) adds nothing.
    with sessions.begin() as session:
        collect(session, files)
    with sessions() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Metrics)) == 2
        assert session.scalar(sa.select(sa.func.count()).select_from(MetricValue)) == 4


def test_bulk_rows_read_back_like_orm_rows(db_url: str) -> None:
    """Text that COPY and SQL must carry verbatim, empty text apart from NULL, exact floats and
    timestamps: a row written by insert_rows reads back equal to one the ORM wrote."""
    sessions = open_database(db_url)
    ids = _attempts(sessions, 2)
    when = datetime(2026, 11, 23, 7, 30, 15, 123456, tzinfo=timezone.utc)
    awkward = 'tab\there\nnew line\r\\backslash "quoted" \\N ünïcödé ;DROP TABLE runs;--'
    values = {"schema": "orch.metrics/1", "device_model": "", "world_size": 3, "code_revision": None,
              "raw": awkward, "ingested_at": when, "tflops": 0.1 + 0.2, "mfu": 1e-300, "peak_mem_gb": 12345678.9}
    with sessions.begin() as session:
        session.add(Metrics(attempt_id=ids[0], **values))
        table = Metrics.__table__
        assert isinstance(table, sa.Table)  # a mapped class's FromClause, here always its Table
        insert_rows(session.connection(), table, ["attempt_id", *values], [(ids[1], *values.values())])
    with sessions() as session:
        orm_row, bulk_row = (session.scalars(sa.select(Metrics).where(Metrics.attempt_id == i)).one() for i in ids)
        for name in values:
            assert getattr(bulk_row, name) == getattr(orm_row, name), name
        assert bulk_row.raw == awkward and bulk_row.device_model == "" and bulk_row.code_revision is None
        assert bulk_row.tflops == 0.1 + 0.2


def test_runs_on_the_same_software_and_node_share_one_environment(db_url: str, tmp_path: Path) -> None:
    """The command line, scheduler variables and rank hosts differ from run to run; they stay in the
    stored document but do not make a new environment. Another torch or another node does."""
    sessions = open_database(db_url)
    ids = _attempts(sessions, 4)
    envs = [
        {**GOOD["env"], "hostname": "nid001", "argv": ["gemm.py", "--m", "64"], "scheduler_env": {"ORCH_RUN_ID": "r0"},
         "hostnames": ["nid001"], "hostnames_by_rank": ["nid001"]},
        {**GOOD["env"], "hostname": "nid001", "argv": ["gemm.py", "--m", "128"], "scheduler_env": {"ORCH_RUN_ID": "r1"},
         "hostnames": ["nid001", "nid002"], "hostnames_by_rank": ["nid001", "nid002"]},
        {**GOOD["env"], "hostname": "nid002", "argv": ["gemm.py"], "scheduler_env": {"ORCH_RUN_ID": "r2"}},
        {**GOOD["env"], "hostname": "nid001", "torch": "2.14.1", "argv": ["gemm.py"]},
    ]
    files = []
    for attempt_id, env in zip(ids, envs):
        path = tmp_path / f"{attempt_id}.json"
        path.write_text(json.dumps({**GOOD, "env": env}))
        files.append((attempt_id, path))
    with sessions.begin() as session:
        assert all(o.ok for o in collect(session, files).values())
    with sessions() as session:
        by_attempt = dict(session.execute(sa.select(Metrics.attempt_id, Metrics.environment_id)).all())
        assert by_attempt[ids[0]] == by_attempt[ids[1]]
        assert len({by_attempt[ids[0]], by_attempt[ids[2]], by_attempt[ids[3]]}) == 3
        stored = session.scalars(sa.select(Environment).where(Environment.id == by_attempt[ids[0]])).one()
        assert stored.hostname == "nid001" and "argv" not in json.loads(stored.data)
        raw = session.scalar(sa.select(Metrics.raw).where(Metrics.attempt_id == ids[1]))
        assert raw is not None
        assert json.loads(raw)["env"]["argv"] == ["gemm.py", "--m", "128"]  # nothing lost
        provenance: dict[str, str] = dict(session.execute(sa.text("SELECT run_id, torch FROM provenance")).all())
        assert provenance["r0"] == "2.13.0" and provenance["r3"] == "2.14.1"
