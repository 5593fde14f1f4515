"""Derived views on real runs: scaling and repeat spread match a hand computation; export; upgrade in place."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

from tests.conftest import run_orch, write

SWEEP = """\
name: scale
experiments:
  - name: gemm-scaling
    workload: gemm
    sites: [local]
    walltime: "00:05:00"
    grid:
      devices: [1, 2, 4]
      m: 96
      n: 96
      k: 96
      warmup: 2
      iters: 5
      repeats: 2
"""


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("scale")
    sweep = write(workdir / "scale.yaml", SWEEP)
    run_orch("run", str(sweep), cwd=workdir, check=True)
    return workdir


def sql(workdir: Path, query: str) -> list[dict]:
    return json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, check=True).stdout)


def test_scaling_view_matches_hand_computation(scaled: Path) -> None:
    rows = sql(scaled, "SELECT devices, tflops FROM results WHERE status = 'completed'")
    assert len(rows) == 6
    by_devices: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        by_devices[row["devices"]].append(row["tflops"])
    mean = {d: sum(v) / len(v) for d, v in by_devices.items()}

    scaling = sql(scaled, "SELECT devices, repeats, throughput_metric, base_devices, speedup, efficiency "
                          "FROM scaling ORDER BY devices")
    assert [r["devices"] for r in scaling] == [1, 2, 4]
    for row in scaling:
        d = row["devices"]
        assert row["repeats"] == 2 and row["base_devices"] == 1 and row["throughput_metric"] == "tflops"
        assert row["speedup"] == pytest.approx(mean[d] / mean[1], rel=1e-9)
        assert row["efficiency"] == pytest.approx(mean[d] / mean[1] / d, rel=1e-9)


def test_repeat_spread(scaled: Path) -> None:
    rows = sql(scaled, "SELECT devices, tflops FROM results")
    spread = {r["devices"]: r for r in sql(scaled, "SELECT * FROM repeat_spread")}
    for devices, stats in spread.items():
        values = [r["tflops"] for r in rows if r["devices"] == devices]
        assert stats["repeats"] == 2
        assert stats["min"] == pytest.approx(min(values)) and stats["max"] == pytest.approx(max(values))
        assert stats["mean"] == pytest.approx(sum(values) / 2)


def test_provenance_and_cost_views(scaled: Path) -> None:
    prov = sql(scaled, "SELECT * FROM provenance")
    assert len(prov) == 6
    assert all(p["sweep_hash"] and p["script_hash"] and p["orch_version"] and p["torch"] for p in prov)
    assert all(p["code_revision"] for p in prov)  # the workloads run from this git checkout
    cost = sql(scaled, "SELECT nodes, throughput, per_node_hour, per_cost_unit FROM cost")
    assert all(c["per_node_hour"] == pytest.approx(c["throughput"] * 3600 / c["nodes"]) for c in cost)
    # The local profile's price (per device-hour) makes every result's cost known.
    priced = sql(scaled, "SELECT devices, elapsed_s, price_per_device_hour, cost_per_result, price_note FROM cost")
    assert priced and all(c["price_note"] is None for c in priced)
    assert all(c["cost_per_result"] == pytest.approx(c["price_per_device_hour"] * c["devices"] * c["elapsed_s"] / 3600)
               for c in priced)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export(scaled: Path, fmt: str) -> None:
    out = scaled / f"results.{fmt}"
    run_orch("export", "--format", fmt, "--output", str(out), cwd=scaled, check=True)
    if fmt == "csv":
        lines = out.read_text().splitlines()
        assert lines[0].startswith("run_id,") and len(lines) == 7
    elif fmt == "json":
        assert len(json.loads(out.read_text())) == 6
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(out)
        assert table.num_rows == 6 and "tflops" in table.column_names


def _old_run(conn: sa.Connection, run_id: str, workload: str = "gemm", devices: int = 1,
             precision: str = "fp32", tflops: float = 2.5) -> int:
    """A finished run with one completed attempt and its metrics, written with the SQL an older
    schema (0001 on) accepts; the sweep 'old' is made on first use. Returns the attempt id."""
    sweep_id = conn.execute(sa.text("SELECT id FROM sweeps WHERE name = 'old'")).scalar()
    if sweep_id is None:
        conn.execute(sa.text("INSERT INTO sweeps (name, path, content_hash, content, created_at) "
                             "VALUES ('old', '/x.yaml', 'abc', 'name: old', CURRENT_TIMESTAMP)"))
        sweep_id = conn.execute(sa.text("SELECT id FROM sweeps WHERE name = 'old'")).scalar_one()
    conn.execute(sa.text(
        "INSERT INTO runs (id, sweep_id, sweep, experiment, workload, site, status, devices, precision, "
        "repeat, params, spec, walltime_s, max_attempts, retry_on, created_at, updated_at) VALUES "
        "(:id, :s, 'old', 'e', :w, 'local', 'finished', :d, :p, 0, '{}', '{}', 60, 1, '[]', "
        "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"), {"id": run_id, "s": sweep_id, "w": workload, "d": devices,
                                                   "p": precision})
    conn.execute(sa.text("INSERT INTO attempts (run_id, number, state, scheduler, job_name, created_at) "
                         "VALUES (:r, 1, 'completed', 'local', :j, CURRENT_TIMESTAMP)"),
                 {"r": run_id, "j": f"orch-{run_id}-a1"})
    attempt_id = conn.execute(sa.text("SELECT id FROM attempts WHERE run_id = :r"), {"r": run_id}).scalar_one()
    conn.execute(sa.text("INSERT INTO metrics (attempt_id, schema, tflops, raw, ingested_at) VALUES "
                         "(:a, 'orch.metrics/1', :t, '{}', CURRENT_TIMESTAMP)"), {"a": attempt_id, "t": tflops})
    return int(attempt_id)


def test_old_database_is_upgraded_in_place(workdir: Path, db_url: str) -> None:
    """A database at migration 0001 with rows in it keeps every row through `orch db upgrade`."""
    from orchestrator.results.db.engine import current_revision, head_revision, make_engine, upgrade

    engine = make_engine(db_url)
    upgrade(engine, "0001")
    with engine.begin() as conn:
        _old_run(conn, "r1")
    engine.dispose()
    assert current_revision(make_engine(db_url)) == "0001"

    proc = run_orch("db", "upgrade", cwd=workdir, env={"ORCH_DB_URL": db_url}, check=True)
    assert "0001 -> " in proc.stdout
    engine = make_engine(db_url)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT run_id, tflops FROM results")).one()
        assert tuple(row) == ("r1", 2.5)
        assert conn.execute(sa.text("SELECT orch_version FROM runs")).scalar_one() is None
        assert conn.execute(sa.text("SELECT count(*) FROM throughput")).scalar_one() == 1
    engine.dispose()
    # Upgrading again changes nothing.
    again = run_orch("db", "upgrade", cwd=workdir, env={"ORCH_DB_URL": db_url}, check=True)
    assert again.stdout.count(head_revision() or "") == 2


@pytest.mark.parametrize("query_file", sorted((Path(__file__).resolve().parents[2] / "db" / "queries").glob("*.sql")),
                         ids=lambda p: p.stem)
def test_documented_queries_run(scaled: Path, query_file: Path) -> None:
    rows = json.loads(run_orch("sql", "-f", "json", "--file", str(query_file), cwd=scaled, check=True).stdout)
    if query_file.stem in ("scaling_efficiency", "accelerator_comparison", "precision_comparison",
                           "strategy_memory_time"):
        assert rows, f"{query_file.name} returned no rows on a scaling sweep"
    if query_file.stem == "scaling_efficiency":
        assert [r["devices"] for r in rows] == [1, 2, 4] and float(rows[0]["speedup"]) == 1.0


def test_documented_queries_are_valid_on_both_backends(db_url: str) -> None:
    from orchestrator.results.db.engine import open_database

    sessions = open_database(db_url)
    with sessions() as session:
        for query_file in sorted((Path(__file__).resolve().parents[2] / "db" / "queries").glob("*.sql")):
            session.execute(sa.text(query_file.read_text())).all()


GROUPED = ("SELECT workload, precision, devices, COUNT(*) AS n, AVG(tflops) AS tflops FROM results "
           "WHERE status = 'completed' GROUP BY workload, precision, devices")


# The results view's columns as of migration 0003 (later migrations add columns after them).
RESULTS_0003 = ("run_id, sweep, experiment, site, system, workload, status, failure_class, attempt, device_type, "
                "device_model, devices, nodes, precision, strategy, batch_size, seq_len, repeat, params, "
                "tokens_per_s, samples_per_s, tflops, tflops_per_device, mfu, peak_mem_gb, step_time_s, "
                "step_time_p50_s, step_time_p90_s, step_time_std_s, epoch_time_s, bandwidth_gbs, job_id, node_list, "
                "exit_code, elapsed_s, submitted_at, finished_at")


def _migration(name: str) -> ModuleType:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "db" / "migrations" / "versions" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"orch_migration_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_upgrade_to_clustered_result_rows_keeps_every_row(workdir: Path, db_url: str) -> None:
    """0003 -> head with results and metric values in it: the same rows come out, and on SQLite the
    comparison axes are the storage order (grouping by them needs no sort); downgrading keeps them too."""
    from orchestrator.results.db import results
    from orchestrator.results.db.engine import current_revision, head_revision, make_engine, upgrade

    engine = make_engine(db_url)
    upgrade(engine, "0003")
    with engine.begin() as conn:
        for i in range(12):
            attempt_id = _old_run(conn, f"r{i}", workload="gemm" if i % 3 else "conv2d", devices=1 + i % 4,
                                  precision="bf16" if i % 2 else "fp32", tflops=1.0 + i)
            conn.execute(sa.text("INSERT INTO metric_values (attempt_id, name, value) VALUES (:a, 'tflops', :t), "
                                 "(:a, 'step_time_s', 0.5)"), {"a": attempt_id, "t": 1.0 + i})
        # The rows as 0003 wrote them (its own frozen query: the application's has later columns).
        conn.execute(sa.text(_migration("0003_result_rows").BACKFILL))

    def snapshot() -> tuple[list, list, list]:
        with engine.connect() as conn:
            return (sorted(tuple(r) for r in conn.execute(sa.text(f"SELECT {RESULTS_0003} FROM results"))),
                    sorted(tuple(r) for r in conn.execute(sa.text("SELECT * FROM metric_values"))),
                    sorted(tuple(r) for r in conn.execute(sa.text(GROUPED))))

    before = snapshot()
    assert len(before[0]) == 12 and len(before[1]) == 24
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert snapshot() == before
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            create = conn.execute(sa.text("SELECT sql FROM sqlite_master WHERE name = 'result_rows'")).scalar_one()
            assert "WITHOUT ROWID" in create
            plan = " ".join(str(r[-1]) for r in conn.execute(sa.text("EXPLAIN QUERY PLAN " + GROUPED)))
            assert "TEMP B-TREE" not in plan, plan
        # The per-attempt rewrite still finds its row by attempt id.
        from orchestrator.results.db.engine import session_factory

        with session_factory(engine).begin() as session:
            results.record_results(session, [1, 2])
        assert snapshot() == before
        from alembic import command

        from orchestrator.results.db.engine import _alembic_config

        config = _alembic_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0003")
        assert current_revision(engine) == "0003" and snapshot() == before
        upgrade(engine)
        assert snapshot() == before
    engine.dispose()
