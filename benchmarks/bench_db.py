"""Database benchmark: ingestion rate, `orch status` and a grouped query over many result rows.

    .venv/bin/python benchmarks/bench_db.py [--rows 1000000] [--ingest 200000] [--backends sqlite,postgresql]

Prints, per backend:
- metrics files and metric rows (``metric_values``, one per reported number) ingested per
  second through orch's ingest path (validation of each document + batched INSERTs), and the
  metric rows per second of the INSERTs alone;
- the wall time of `orch status` (a real process) and of a grouped query on the `results`
  view once the database holds --rows result rows.
Goals (issue 6): >= 100,000 rows/s into SQLite; status and the grouped query < 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.db import results  # noqa: E402
from orchestrator.db.engine import open_database  # noqa: E402
from orchestrator.db.models import Attempt, Run, SweepRecord  # noqa: E402
from orchestrator.ingest import EnvironmentCache, store_metrics_many  # noqa: E402
from orchestrator.metrics_schema import MetricsFile  # noqa: E402

GROUPED = ("SELECT workload, precision, devices, COUNT(*) AS n, AVG(tflops) AS tflops "
           "FROM results WHERE status = 'completed' GROUP BY workload, precision, devices")


def metrics_doc(i: int) -> str:
    return json.dumps({
        "schema": "orch.metrics/1", "workload": "gemm", "precision": "bf16" if i % 2 else "fp32",
        "world_size": 1 + i % 4, "params": {"m": 1024, "n": 1024, "k": 1024},
        "device": {"type": "cuda", "model": "A100-SXM4-40GB", "count": 1 + i % 4},
        "metrics": {"tflops": 100.0 + i % 97, "tflops_per_device": 50.0, "step_time_s": 0.001,
                    "step_time_p50_s": 0.001, "step_time_p90_s": 0.0012, "peak_mem_gb": 1.5},
        "timing": {"warmup_steps": 5, "timed_steps": 20, "step_times_s": [0.001] * 20},
        "env": {"python": "3.11.7", "torch": "2.13.0", "hostname": f"node{i % 8}"},
    })


def fill(sessions, rows: int, chunk: int = 50_000) -> None:
    """Sweeps, runs and attempts for ``rows`` finished attempts (no metrics yet)."""
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        sweep = SweepRecord(name="bench", path="/bench.yaml", content_hash="x", content="name: bench")
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        with sessions.begin() as session:
            session.execute(sa.insert(Run), [dict(
                id=f"r{i:015d}", sweep_id=sweep_id, sweep="bench", experiment="e", workload="gemm",
                site="local", status="finished", devices=1 + i % 4, nodes=1, precision="bf16" if i % 2 else "fp32",
                repeat=0, params="{}", spec="{}", walltime_s=60, max_attempts=1, retry_on="[]",
                created_at=now, updated_at=now) for i in range(start, stop)])
            session.execute(sa.insert(Attempt), [dict(
                id=i + 1, run_id=f"r{i:015d}", number=1, state="completed", scheduler="local",
                job_name=f"j{i}", job_id=str(i), created_at=now, finished_at=now) for i in range(start, stop)])


def ingest(sessions, first: int, count: int, batch: int = 10_000) -> dict[str, float]:
    """Metrics files/s and metric rows/s through validation + insert; rows/s of the inserts alone."""
    docs = [metrics_doc(i) for i in range(first, first + count)]
    environments = EnvironmentCache()
    insert_time = 0.0
    start = time.perf_counter()
    for offset in range(0, count, batch):
        chunk = docs[offset:offset + batch]
        parsed = [(first + offset + j + 1, MetricsFile.model_validate_json(doc)) for j, doc in enumerate(chunk)]
        t0 = time.perf_counter()
        with sessions.begin() as session:
            store_metrics_many(session, parsed, environments, raws=chunk)
        insert_time += time.perf_counter() - t0
    total = time.perf_counter() - start
    with sessions() as session:
        metric_rows = session.execute(sa.text("SELECT count(*) FROM metric_values")).scalar_one()
    return {"files_per_s": count / total, "metric_rows_per_s": metric_rows / total,
            "metric_rows_per_s_insert_only": metric_rows / insert_time}


def timed(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench(url: str, rows: int, ingest_rows: int, workdir: Path) -> dict[str, float]:
    sessions = open_database(url)
    fill(sessions, rows)
    rates = ingest(sessions, 0, ingest_rows)
    # The rest of the rows get metrics quickly (not timed) so the views see `rows` results.
    with sessions.begin() as session:
        session.execute(sa.text(
            "INSERT INTO metrics (attempt_id, schema, tflops, raw, ingested_at) "
            "SELECT id, 'orch.metrics/1', 100.0 + (id % 97), '{}', finished_at FROM attempts WHERE id > :n"),
            {"n": ingest_rows})
        # What `orch status` writes as each attempt ends, for all of them at once.
        session.execute(sa.text(f"INSERT INTO result_rows ({results.COLUMNS}) {results.SELECT}"))
    engine = sessions.kw["bind"]
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("ANALYZE"))
    with sessions() as session:
        count = session.execute(sa.text("SELECT count(*) FROM results")).scalar_one()
        query_s = timed(lambda: session.execute(sa.text(GROUPED)).all())
    env = {**os.environ, "ORCH_DB_URL": url}
    status_s = timed(lambda: subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", "--json"],
                                            cwd=workdir, env=env, check=True, capture_output=True))
    startup_s = timed(lambda: subprocess.run([sys.executable, "-m", "orchestrator.cli", "--version"],
                                             cwd=workdir, env=env, check=True, capture_output=True))
    return {"result_rows": count, **rates,
            "grouped_query_s": query_s, "orch_status_s": status_s, "cli_startup_s": startup_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="result rows in the database")
    parser.add_argument("--ingest", type=int, default=200_000, help="rows ingested through the timed path")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for backend in args.backends.split(","):
            if backend == "sqlite":
                url = f"sqlite:///{workdir / 'bench.db'}"
                result = bench(url, args.rows, args.ingest, workdir)
            else:
                sys.path.insert(0, str(REPO))
                from tests import pg

                admin = next(pg.server_url()) if args.pg_url == "auto" else args.pg_url
                generator = pg.fresh_database(admin)
                url = next(generator)
                try:
                    result = bench(url, args.rows, args.ingest, workdir)
                finally:
                    sa.create_engine(url).dispose()
                    next(generator, None)
            print(f"{backend:10s} " + "  ".join(
                f"{k}={v:,.0f}" if k.endswith(("per_s", "rows")) else f"{k}={v:.3f}" for k, v in result.items()),
                flush=True)


if __name__ == "__main__":
    main()
