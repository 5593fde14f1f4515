"""The database as a user meets it: the user guide's PostgreSQL URL (docs/guide.md) on a fresh install, both psycopg
drivers, `orch sql` read-only unless --write, `results` rebuilt from the tables, and database
mistakes (unknown dialect, unmakeable path, read-only file) as one line and exit 2."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import run_orch, write

SWEEP = """\
name: one
experiments:
  - name: gemm
    workload: gemm
    sites: [local]
    walltime: "00:05:00"
    grid: {m: 32, n: 32, k: 32, warmup: 1, iters: 2, devices: [1], precision: [fp32, bf16]}
"""


@pytest.fixture
def pg_url(pg_admin_url: str):
    from tests import pg

    yield from pg.fresh_database(pg_admin_url)


def _readme_form(url: str) -> str:
    """postgresql://user@host:port/db, no driver named (what docs/guide.md shows)."""
    parsed = sa.engine.make_url(url)
    return f"postgresql://{parsed.username}@{parsed.host}:{parsed.port}/{parsed.database}"


def test_readme_postgresql_url_runs_plan_to_results(workdir: Path, pg_url: str) -> None:
    """`--db postgresql://user@host:5432/db` as written in docs/guide.md: SQLAlchemy picks psycopg 3,
    orch's own dependency; plan, run and the results view work through it."""
    url = _readme_form(pg_url)
    sweep = write(workdir / "one.yaml", SWEEP)
    run_orch("--db", url, "plan", str(sweep), cwd=workdir, check=True)
    proc = run_orch("--db", url, "run", str(sweep), "--interval", "0.5", cwd=workdir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(run_orch("--db", url, "sql", "-f", "json", "SELECT precision, status, tflops FROM results "
                               "ORDER BY precision", cwd=workdir, check=True).stdout)
    assert [(r["precision"], r["status"]) for r in rows] == [("bf16", "completed"), ("fp32", "completed")]
    assert all(r["tflops"] > 0 for r in rows)
    engine = sa.create_engine(url)
    assert engine.dialect.driver == "psycopg"
    engine.dispose()


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_both_postgresql_drivers_copy_text_verbatim(pg_url: str, driver: str) -> None:
    """The bulk path (COPY) on psycopg 3 and on psycopg2: awkward text arrives unchanged."""
    from orchestrator.results.db.bulk import insert_rows
    from orchestrator.results.db.engine import open_engine

    url = sa.engine.make_url(pg_url).set(drivername=f"postgresql+{driver}").render_as_string(hide_password=False)
    engine = open_engine(url)
    assert engine.dialect.driver == driver
    table = sa.Table("copy_probe", sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("text", sa.Text),
                     sa.Column("x", sa.Float))
    awkward = 'tab\there\nnew line\r\\backslash "q" \\N ünï ;DROP TABLE runs;--'
    with engine.begin() as conn:
        table.create(conn)
        insert_rows(conn, table, ["id", "text", "x"], [(1, awkward, 0.1 + 0.2), (2, "", None)])
    with engine.connect() as conn:
        assert conn.execute(sa.select(table).order_by(table.c.id)).all() == [(1, awkward, 0.1 + 0.2), (2, "", None)]
    engine.dispose()


def test_orch_sql_is_read_only_unless_write(workdir: Path, db_url: str) -> None:
    db = {"ORCH_DB_URL": db_url}
    run_orch("plan", str(write(workdir / "one.yaml", SWEEP)), cwd=workdir, env=db, check=True)
    for statement in ("DELETE FROM runs", "DROP TABLE attempts", "UPDATE runs SET status = 'planned'",
                      "DELETE FROM result_rows", "DROP VIEW results"):
        proc = run_orch("sql", statement, cwd=workdir, env=db)
        assert proc.returncode == 2, (statement, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "read-only" in proc.stderr and "--write" in proc.stderr
        assert "Traceback" not in proc.stderr
    count = run_orch("sql", "-f", "json", "SELECT count(*) AS n FROM runs", cwd=workdir, env=db, check=True)
    assert json.loads(count.stdout) == [{"n": 2}]
    done = run_orch("sql", "--write", "DELETE FROM runs WHERE precision = 'bf16'", cwd=workdir, env=db, check=True)
    assert "1 row(s) affected" in done.stdout
    count = run_orch("sql", "-f", "json", "SELECT count(*) AS n FROM runs", cwd=workdir, env=db, check=True)
    assert json.loads(count.stdout) == [{"n": 1}]


def test_read_only_sql_does_not_wait_behind_a_writer(workdir: Path) -> None:
    """SQLite in WAL mode: a reader never needs the write lock another process holds."""
    db_path = workdir / "orch.db"
    db = {"ORCH_DB_URL": f"sqlite:///{db_path}"}
    run_orch("plan", str(write(workdir / "one.yaml", SWEEP)), cwd=workdir, env=db, check=True)
    writer = sqlite3.connect(db_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE runs SET updated_at = updated_at")
    try:
        started = time.monotonic()
        proc = run_orch("sql", "-f", "json", "SELECT count(*) AS n FROM runs", cwd=workdir, env=db, timeout=25)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == [{"n": 2}]
        assert time.monotonic() - started < 25  # the busy timeout is 30 s
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_results_rebuilt_from_the_tables(workdir: Path, db_url: str) -> None:
    """`DELETE FROM result_rows` no longer loses `results`: `orch db rebuild-results` writes the same
    rows again from runs, attempts and metrics, as often as asked."""
    db = {"ORCH_DB_URL": db_url}
    sweep = write(workdir / "one.yaml", SWEEP)
    proc = run_orch("run", str(sweep), "--interval", "0.5", cwd=workdir, env=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    query = "SELECT * FROM results ORDER BY run_id, attempt"
    before = json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, env=db, check=True).stdout)
    assert len(before) == 2
    run_orch("sql", "--write", "DELETE FROM result_rows", cwd=workdir, env=db, check=True)
    assert json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, env=db, check=True).stdout) == []
    for _ in range(2):
        rebuilt = run_orch("db", "rebuild-results", "--json", cwd=workdir, env=db, check=True)
        assert json.loads(rebuilt.stdout) == {"attempts": 2}
        assert json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, env=db, check=True).stdout) == before


@pytest.mark.parametrize("url, expected", [
    ("foo://host/db", "unknown database 'foo'"),
    ("postgresql+nodriver://u@h/d", "unknown database driver 'postgresql+nodriver'"),
    ("sqlite:////etc/passwd/orch.db", "cannot create the database folder /etc/passwd"),
    ("not a url", "invalid database URL"),
])
def test_database_mistakes_are_one_line(workdir: Path, url: str, expected: str) -> None:
    sweep = write(workdir / "one.yaml", SWEEP)
    for args in (("plan", str(sweep)), ("submit",), ("status",), ("run", str(sweep)), ("sql", "SELECT 1")):
        proc = run_orch("--db", url, *args, cwd=workdir)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: ") and expected in proc.stderr and proc.stderr.count("\n") == 1


def test_read_only_database_file_is_one_line(workdir: Path) -> None:
    """A database file that cannot be written (here: immutable, which binds root too)."""
    db_path = workdir / "ro.db"
    db = {"ORCH_DB_URL": f"sqlite:///{db_path}"}
    run_orch("plan", str(write(workdir / "one.yaml", SWEEP)), cwd=workdir, env=db, check=True)  # to submit
    sweep = write(workdir / "two.yaml", SWEEP.replace("name: one", "name: two"))  # new runs to record
    for suffix in ("-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    if subprocess.run(["chattr", "+i", str(db_path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        for args in (("plan", str(sweep)), ("run", str(sweep)), ("submit",)):
            proc = run_orch(*args, cwd=workdir, env=db)
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
            assert "readonly database" in proc.stderr or "read-only" in proc.stderr
    finally:
        subprocess.run(["chattr", "-i", str(db_path)], check=True)


def test_run_on_a_site_the_sweep_does_not_name_is_refused(workdir: Path) -> None:
    sweep = write(workdir / "one.yaml", SWEEP)
    proc = run_orch("run", str(sweep), "--site", "sandbox", cwd=workdir)
    assert proc.returncode == 2
    assert "does not name this site" in proc.stderr and "its sites: local" in proc.stderr
    # Nothing was planned or recorded.
    counts = json.loads(run_orch("status", "--json", cwd=workdir, check=True).stdout)["counts"]
    assert counts == {}


def test_run_with_nothing_runnable_on_the_site_is_not_success(workdir: Path) -> None:
    """Every run skipped (here: more devices than the local site has): exit 1, saying why."""
    sweep = write(workdir / "big.yaml", SWEEP.replace("devices: [1]", "devices: [4096]"))
    proc = run_orch("run", str(sweep), "--site", "local", cwd=workdir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nothing to run on local" in proc.stderr and "skipped" in proc.stderr


def test_submit_for_a_site_with_no_runs(workdir: Path) -> None:
    run_orch("plan", str(write(workdir / "one.yaml", SWEEP)), cwd=workdir, check=True)
    proc = run_orch("submit", "--site", "sandbox", cwd=workdir)
    assert proc.returncode == 2 and "no runs of site sandbox" in proc.stderr
    proc = run_orch("submit", "--sweep", "nosuch", cwd=workdir)
    assert proc.returncode == 2 and "no runs of sweep nosuch" in proc.stderr
    # Runs of the site exist but none waits: not a mistake of the command line (exit 2), but
    # nothing was submitted (exit 1), and it says where the runs are.
    run_orch("sql", "--write", "UPDATE runs SET status = 'finished'", cwd=workdir, check=True)
    proc = run_orch("submit", "--site", "local", cwd=workdir)
    assert proc.returncode == 1 and "nothing to submit of site local" in proc.stderr
    assert "finished" in proc.stderr
