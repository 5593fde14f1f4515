"""Database benchmark: ingestion rate, `orch status` and a grouped query over many result rows.

    .venv/bin/python benchmarks/bench_db.py [--rows 1000000] [--ingest 200000] [--backends sqlite,postgresql]

Prints, per backend:
- metrics files and metric rows (``metric_values``, one per reported number) ingested per
  second through the path `orch status` takes when jobs end (each file read from disk and
  validated, bulk INSERTs, result rows written), and files/s of reading + validating alone;
- once the database holds --rows result rows: the wall time of `orch status` (a real process,
  nothing in flight), of the grouped comparison query (GROUPED), of a grouping by other
  columns (GROUPED_OTHER) and of the whole `scaling` view.
Goals (issue 6): >= 100,000 metric rows/s into SQLite; status and the grouped query < 0.5 s.
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

from orchestrator.results.db import results  # noqa: E402
from orchestrator.results.db.engine import open_database  # noqa: E402
from orchestrator.results.db.models import Attempt, Run, SweepRecord  # noqa: E402
from orchestrator.results.db.results import record_results  # noqa: E402
from orchestrator.results.ingest import EnvironmentCache, collect, gc_paused, load_metrics  # noqa: E402

# The comparison every study table starts from: by workload, precision and device count.
GROUPED = ("SELECT workload, precision, devices, COUNT(*) AS n, AVG(tflops) AS tflops "
           "FROM results WHERE status = 'completed' GROUP BY workload, precision, devices")
# Grouped by columns that are not the storage order (SQLite sorts every row for these).
GROUPED_OTHER = ("SELECT site, device_model, COUNT(*) AS n, AVG(tflops) AS tflops "
                 "FROM results WHERE status = 'completed' GROUP BY site, device_model")
SCALING = "SELECT * FROM scaling"
WORKLOADS = ("gemm", "conv2d", "transformer_block", "gpt2")
SITES = (("polaris", "A100-SXM4-40GB"), ("baskerville", "A100-SXM4-40GB"), ("dawn", "Max 1550"),
         ("jade2", "V100-SXM2-32GB"), ("local", "host-cpu"))


def metrics_doc(i: int) -> str:
    """A metrics document shaped like the gemm workload's real ``metrics.json`` (about 3 KB:
    13 metrics of which 12 are numbers, per-step times, the captured environment with this
    run's command line and scheduler variables), varied per run: 64 nodes, two precisions."""
    step = 0.001 + (i % 97) * 1e-6
    node = f"nid{i % 64:05d}"
    return json.dumps({
        "schema": "orch.metrics/1", "workload": "gemm", "status": "ok",
        "params": {"m": 1024, "n": 1024, "k": 1024, "warmup": 5, "iters": 20, "tag": ""},
        "precision": "bf16" if i % 2 else "fp32", "world_size": 1,
        "device": {"type": "cuda", "model": "NVIDIA A100-SXM4-40GB", "count": 1},
        "metrics": {"step_time_s": step, "step_time_p50_s": step, "step_time_p90_s": step * 1.1,
                    "step_time_mean_s": step * 1.02, "step_time_min_s": step * 0.97, "step_time_max_s": step * 1.4,
                    "step_time_std_s": step * 0.05, "peak_mem_gb": 0.0252, "tflops": 2 * 1024 ** 3 / step / 1e12,
                    "tflops_per_device": 2 * 1024 ** 3 / step / 1e12, "mfu": None,
                    "flops_per_step": 2.0 * 1024 ** 3, "bytes_per_step": 3.0 * 2 * 1024 ** 2},
        "timing": {"warmup_steps": 5, "timed_steps": 20, "step_times_s": [step * (1 + j / 1000) for j in range(20)]},
        "env": {"python": "3.11.7", "python_impl": "CPython", "torch": "2.5.1+cu124", "cuda": "12.4", "hip": None,
                "xpu": None, "oneapi": None, "nccl": "2.21.5", "cudnn": 90100, "driver": "550.54.15",
                "backend": None, "hostname": node, "os": "Linux-5.14.21-x86_64-with-glibc2.31",
                "cpu_model": "AMD EPYC 7532 32-Core Processor", "cpu_count": 64, "torch_threads": 32,
                "gpu_model": "NVIDIA A100-SXM4-40GB",
                "argv": ["workloads/gemm.py", "--m", "1024", "--n", "1024", "--k", "1024", "--output",
                         f"/lus/runs/bench/r{i:015d}/metrics.json"],
                "numpy": "2.1.3", "scheduler_env": {"PBS_JOBID": f"{100000 + i}.polaris-pbs-01",
                                                    "ORCH_RUN_ID": f"r{i:015d}"},
                "git_rev": "5e6b3312d9d46ba0244a15f8e1b00c1f59092625", "git_dirty": False,
                "hostnames": [node], "hostnames_by_rank": [node], "launcher": "mpiexec"},
        "started_at": "2026-11-23T07:00:00+00:00", "finished_at": "2026-11-23T07:00:05+00:00",
    }, indent=2)  # as the harness writes it


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
                id=f"r{i:015d}", sweep_id=sweep_id, sweep="bench", experiment="e", workload=WORKLOADS[i % 4],
                site=SITES[i % 5][0], device_model=SITES[i % 5][1], status="finished", devices=2 ** (i % 5),
                nodes=1 + (i % 5) // 3, precision="bf16" if i % 2 else "fp32", repeat=i % 3,
                params=json.dumps({"m": 1024 * (1 + i % 7), "warmup": 5}), spec="{}", walltime_s=60,
                max_attempts=1, retry_on="[]", created_at=now, updated_at=now) for i in range(start, stop)])
            session.execute(sa.insert(Attempt), [dict(
                id=i + 1, run_id=f"r{i:015d}", number=1, state="completed", scheduler="local",
                job_name=f"j{i}", job_id=str(i), created_at=now, finished_at=now) for i in range(start, stop)])


def ingest(sessions, first: int, count: int, files_dir: Path, batch: int = 5_000) -> dict[str, float]:
    """Metrics collected exactly as `orch status` collects the attempts that ended in one poll
    (``ingest.collect`` then ``record_results``, ``batch`` attempts a poll): each file read from
    disk and validated, one bulk INSERT per table, the result rows written. Returns files/s and
    metric rows/s of that whole path, and files/s of reading + validating alone (no database)."""
    files_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(first, first + count):
        path = files_dir / f"{i}.json"
        path.write_text(metrics_doc(i))
        paths.append((i + 1, path))
    start = time.perf_counter()
    with gc_paused():
        for _, path in paths:
            load_metrics(path)
    parse_s = time.perf_counter() - start
    environments = EnvironmentCache()
    start = time.perf_counter()
    for offset in range(0, count, batch):
        chunk = paths[offset:offset + batch]
        with sessions.begin() as session:
            outcomes = collect(session, chunk, environments)
            record_results(session, [attempt_id for attempt_id, _ in chunk])
        assert all(o.ok for o in outcomes.values())
    total = time.perf_counter() - start
    with sessions() as session:
        metric_rows = session.execute(sa.text("SELECT count(*) FROM metric_values")).scalar_one()
        result_rows = session.execute(sa.text("SELECT count(*) FROM result_rows WHERE tflops IS NOT NULL")).scalar_one()
    assert result_rows == count, (result_rows, count)
    return {"files_per_s": count / total, "metric_rows_per_s": metric_rows / total,
            "read_validate_files_per_s": count / parse_s}


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
    rates = ingest(sessions, 0, ingest_rows, workdir / "metrics")
    # The rest of the rows get metrics quickly (not timed) so the views see `rows` results.
    with sessions.begin() as session:
        session.execute(sa.text(
            "INSERT INTO metrics (attempt_id, schema, tflops, raw, ingested_at) "
            "SELECT id, 'orch.metrics/1', 100.0 + (id % 97), '{}', finished_at FROM attempts WHERE id > :n"),
            {"n": ingest_rows})
        # What `orch status` writes as each attempt ends, for all of them at once.
        session.execute(sa.text(f"INSERT INTO result_rows ({results.COLUMNS}) {results.SELECT} AND a.id > :n"),
                        {"n": ingest_rows})
    engine = sessions.kw["bind"]
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))  # the steady state autovacuum keeps, not a fresh bulk load
    # Queries are timed as a user's next command sees the database: from a new connection after
    # the writer has closed (SQLite has then folded its write-ahead log into the file).
    engine.dispose()
    sessions = open_database(url)
    engine = sessions.kw["bind"]
    with sessions() as session:
        count = session.execute(sa.text("SELECT count(*) FROM results")).scalar_one()
        query_s = timed(lambda: session.execute(sa.text(GROUPED)).all())
        other_s = timed(lambda: session.execute(sa.text(GROUPED_OTHER)).all())
        scaling_s = timed(lambda: session.execute(sa.text(SCALING)).all(), repeats=1)
    env = {**os.environ, "ORCH_DB_URL": url}
    status_s = timed(lambda: subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", "--json"],
                                            cwd=workdir, env=env, check=True, capture_output=True))
    startup_s = timed(lambda: subprocess.run([sys.executable, "-m", "orchestrator.cli", "--version"],
                                             cwd=workdir, env=env, check=True, capture_output=True))
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            print(f"PostgreSQL {conn.execute(sa.text('SHOW server_version')).scalar_one()}", flush=True)
    engine.dispose()
    return {"result_rows": count, **rates, "grouped_query_s": query_s, "grouped_other_axes_s": other_s,
            "scaling_view_s": scaling_s, "orch_status_s": status_s, "cli_startup_s": startup_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="result rows in the database")
    parser.add_argument("--ingest", type=int, default=200_000, help="rows ingested through the timed path")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    import platform
    import sqlite3

    print(f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs; "
          f"{args.rows:,} result rows, {args.ingest:,} metrics files ingested", flush=True)
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
