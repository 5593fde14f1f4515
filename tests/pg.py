"""A real PostgreSQL for the tests: the machine's server when one answers, else one started here.

Each test gets its own fresh database, dropped afterwards.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

DEFAULT_URL = os.environ.get("ORCH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _own_port() -> int:
    """The port of a server this process starts: one per pytest-xdist worker (gw0 -> 55432, gw1 -> 55433...)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return 55432 + int(worker[2:] or 0)


def _answers(url: str) -> bool:
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:
        return False


def _pg_bin() -> Path:
    roots = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not roots:
        # Parallel workers install once: the first holds the lock, the others then find the binaries.
        with open(Path(tempfile.gettempdir()) / "orch-tests-apt.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not sorted(Path("/usr/lib/postgresql").glob("*/bin")):
                subprocess.run(["apt-get", "update", "-qq"], check=False)
                subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], check=True,
                               env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        roots = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not roots:
        raise RuntimeError("PostgreSQL binaries not found under /usr/lib/postgresql after installing")
    return roots[-1]


def _start_own_server() -> tuple[str, Path]:
    """initdb + pg_ctl start in a temporary directory, as the postgres user (root may not run it)."""
    bindir = _pg_bin()
    port = _own_port()
    datadir = Path(tempfile.mkdtemp(prefix="orch-pg-"))
    shutil.chown(datadir, "postgres", "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run(as_pg + [str(bindir / "initdb"), "-D", str(datadir / "data"), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True)
    subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", str(datadir / "data"), "-l", str(datadir / "log"),
                            "-o", f"-p {port} -k {datadir} -c listen_addresses=127.0.0.1", "-w", "start"],
                   check=True, capture_output=True)
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    for _ in range(50):
        if _answers(url):
            return url, datadir
        time.sleep(0.2)
    raise RuntimeError(f"PostgreSQL started in {datadir} does not answer; see {datadir / 'log'}")


def server_url() -> Iterator[str]:
    """The admin URL of a running server (generator: stops a server it started)."""
    if _answers(DEFAULT_URL):
        yield DEFAULT_URL
        return
    url, datadir = _start_own_server()
    try:
        yield url
    finally:
        as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(as_pg + [str(_pg_bin() / "pg_ctl"), "-D", str(datadir / "data"), "-m", "fast", "stop"],
                       check=False, capture_output=True)
        shutil.rmtree(datadir, ignore_errors=True)


def fresh_database(admin_url: str) -> Iterator[str]:
    name = f"orch_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
