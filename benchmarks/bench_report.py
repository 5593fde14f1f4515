"""Report benchmark: `orch report` over many result rows (issue 13: 100,000 rows in under 10 s).

    .venv/bin/python benchmarks/bench_report.py [--rows 100000] [--ingest 5000]

The database is made the way benchmarks/bench_db.py makes it: runs and attempts in bulk,
the first --ingest attempts' metrics files (bench_db's realistic GEMM documents) collected
through the path `orch status` takes, the rest of the metrics by SQL, then the result
rows `orch status` writes. Here devices (1..16 at every site), strategies, model sizes,
sequence lengths and 1% failures vary too, so every figure the views support has data.

Prints the wall time of `orch report` as a user runs it (a new process: start-up, imports,
queries, drawing, page), for the single page and for the directory form (each figure also
as SVG and PNG), with its CPU time (user + system: the wall time it would take on an idle
core, on a machine shared with other work), the time per stage measured in-process, the
page's size and the figures drawn.
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

from benchmarks.bench_db import SITES, ingest  # noqa: E402
from orchestrator.results.db import results  # noqa: E402
from orchestrator.results.db.bulk import insert_rows  # noqa: E402
from orchestrator.results.db.engine import open_database, open_engine  # noqa: E402
from orchestrator.results.db.models import Attempt, Run, SweepRecord  # noqa: E402

WORKLOADS = ("gemm", "conv2d", "transformer_block", "gpt2")
STRATEGIES = ("ddp", "fsdp-full", "zero2")
FAILURES = ("timeout", "out_of_memory", "node_failure")


def run_row(i: int, sweep_id: int, now: datetime) -> tuple:
    workload = WORKLOADS[i % 4]
    site, model = SITES[i % 5]
    lm = workload in ("gpt2", "transformer_block")
    params: dict[str, str | int] = (
        {"model": ("gpt2", "gpt2-medium")[(i // 13) % 2]} if lm else {"m": 1024 * (1 + (i // 3) % 7)})
    params.update({"warmup": 5, "iters": 20})
    devices = 2 ** ((i // 20) % 5)
    return (f"r{i:015d}", sweep_id, f"bench-{i % 3}", "e", workload, site, "finished", devices,
            max(1, devices // 4), "bf16" if i % 2 else "fp32", STRATEGIES[(i // 7) % 3] if lm else None,
            8 if lm else None, (512, 1024, 2048)[(i // 11) % 3] if lm else None, (i // 100) % 3,
            json.dumps(params), "{}", 60, 1, "[]", model, now, now)


RUN_COLUMNS = ("id", "sweep_id", "sweep", "experiment", "workload", "site", "status", "devices", "nodes",
               "precision", "strategy", "batch_size", "seq_len", "repeat", "params", "spec", "walltime_s",
               "max_attempts", "retry_on", "device_model", "created_at", "updated_at")
ATTEMPT_COLUMNS = ("id", "run_id", "number", "state", "failure_class", "scheduler", "job_name", "job_id",
                   "created_at", "finished_at")


def fill(sessions, rows: int, ingested: int, files_dir: Path, chunk: int = 50_000) -> None:
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        sweep = SweepRecord(name="bench", path="/bench.yaml", content_hash="x", content="name: bench")
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    runs, attempts = Run.__table__, Attempt.__table__
    assert isinstance(runs, sa.Table) and isinstance(attempts, sa.Table)  # a mapped class's FromClause: its Table
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        with sessions.begin() as session:
            conn = session.connection()
            insert_rows(conn, runs, RUN_COLUMNS, [run_row(i, sweep_id, now) for i in range(start, stop)])
            failed = [i >= ingested and i % 100 == 99 for i in range(start, stop)]
            insert_rows(conn, attempts, ATTEMPT_COLUMNS, [
                (i + 1, f"r{i:015d}", 1, "failed" if bad else "completed", FAILURES[i % 3] if bad else None,
                 "local", f"j{i}", str(i), now, now) for i, bad in zip(range(start, stop), failed)])
    ingest(sessions, 0, ingested, files_dir)  # the first attempts' metrics files, as `orch status` collects them
    with sessions.begin() as session:
        session.execute(sa.text(
            "INSERT INTO metrics (attempt_id, schema, tflops, tokens_per_s, peak_mem_gb, step_time_s, raw, "
            "ingested_at) SELECT a.id, 'orch.metrics/1', 100.0 + (a.id % 97), "
            "CASE WHEN r.workload IN ('gpt2', 'transformer_block') THEN 5000.0 + (a.id % 997) END, "
            "10.0 + (a.id % 31), 0.05 + (a.id % 13) / 100.0, '{}', a.finished_at "
            "FROM attempts a JOIN runs r ON r.id = a.run_id WHERE a.id > :n AND a.state = 'completed'"),
            {"n": ingested})
        session.execute(sa.text(f"INSERT INTO result_rows ({results.COLUMNS}) {results.SELECT} AND a.id > :n"),
                        {"n": ingested})


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes: on a machine shared with other
    work, the time the report would take on an idle core."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="result rows in the database")
    parser.add_argument("--ingest", type=int, default=5_000, help="rows whose metrics files are collected")
    args = parser.parse_args()
    import platform
    import sqlite3

    import matplotlib

    print(f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, matplotlib {matplotlib.__version__}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {args.rows:,} result rows", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        url = f"sqlite:///{work / 'bench.db'}"
        sessions = open_database(url)
        t0 = time.perf_counter()
        fill(sessions, args.rows, args.ingest, work / "metrics")
        sessions.kw["bind"].dispose()
        print(f"database made in {time.perf_counter() - t0:.1f} s", flush=True)

        env = {**os.environ, "ORCH_DB_URL": url}
        for form, target in (("page", "report.html"), ("directory", "report/")):
            t0, cpu0 = time.perf_counter(), _children_cpu()
            proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "report", "-o", f"{work}/{target}"],
                                  cwd=work, env=env, capture_output=True, text=True)
            wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
            assert proc.returncode == 0, proc.stderr
            page = work / target / "index.html" if form == "directory" else work / target
            print(f"orch report ({form:9s}): {wall:.2f} s wall, {cpu:.2f} s CPU (load {os.getloadavg()[0]:.1f}), "
                  f"page {page.stat().st_size / 1e6:.2f} MB; "
                  f"{proc.stderr.splitlines()[0]}", flush=True)

        from orchestrator.results.report import build_report

        engine = open_engine(url)
        with engine.connect() as conn:
            count = conn.execute(sa.text("SELECT COUNT(*) FROM results")).scalar_one()
        for form, directory in (("page", False), ("directory", True)):
            t0, cpu0 = time.perf_counter(), time.process_time()
            done = build_report(engine, work / f"inproc-{form}" / ("" if directory else "r.html"), directory)
            total, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            stages = "  ".join(f"{k}={v:.2f}s" for k, v in done.seconds.items())
            print(f"in-process ({form:9s}, {count:,} results): {total:.2f} s wall, {cpu:.2f} s CPU; wall by stage: "
                  f"{stages}  figures={len(done.drawn)} "
                  f"runs_in_provenance={done.runs}", flush=True)
        print("not drawn: " + "; ".join(f"{s.key} ({s.reason})" for s in done.skipped), flush=True)
        engine.dispose()


if __name__ == "__main__":
    main()
