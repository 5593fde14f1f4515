"""A database password never lands in output, scripts, run directories, the database, or a job's environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import run_orch, write

SECRET = "s3cr3t-Pa55-xyzzy"

ENV_DUMPING_PYTHON = """#!{python}
import json, os, sys
a = sys.argv[1:]
open("job-environment.json", "w").write(json.dumps(dict(os.environ)))
json.dump({{"schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 1,
           "device": {{"type": "cpu", "model": "x", "count": 1}}, "metrics": {{"tflops": 1.0}},
           "timing": {{"warmup_steps": 0, "timed_steps": 1}}}}, open(a[a.index("--output") + 1], "w"))
"""

SITE = """\
name: dumper
scheduler: local
python: {python}
device: {{type: cpu, model: x, per_node: 1, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
"""

SWEEP = """\
name: secrets
experiments:
  - name: e
    workload: gemm
    sites: [dumper]
    grid: {m: [1, 2]}
"""


@pytest.mark.parametrize("how", ["url", "PGPASSWORD"])
def test_password_goes_nowhere(workdir: Path, pg_admin_url: str, how: str) -> None:
    from tests import pg

    fresh = pg.fresh_database(pg_admin_url)
    url = next(fresh)
    try:
        # The test server trusts local connections, so any password is accepted: what matters
        # is where orch lets it travel.
        parsed = sa.engine.make_url(url)
        env = {"ORCH_SITES_PATH": str(workdir / "sites")}
        if how == "url":
            env["ORCH_DB_URL"] = parsed.set(password=SECRET).render_as_string(hide_password=False)
        else:
            env["ORCH_DB_URL"], env["PGPASSWORD"] = url, SECRET
        fake = write(workdir / "fake-python", ENV_DUMPING_PYTHON.format(python=sys.executable))
        fake.chmod(0o755)
        write(workdir / "sites" / "dumper.yaml", SITE.format(python=fake))
        sweep = write(workdir / "s.yaml", SWEEP)
        outputs = [run_orch(*args, cwd=workdir, env=env) for args in
                   (("run", str(sweep)), ("status", "--json"), ("sql", "SELECT * FROM results"), ("db", "url"),
                    ("plan", str(sweep), "--show"))]
        assert all(p.returncode == 0 for p in outputs), [p.stderr for p in outputs]
        for proc in outputs:
            assert SECRET not in proc.stdout + proc.stderr
        assert "***" in outputs[3].stdout or how == "PGPASSWORD"
        files = [p for p in (workdir / ".orch").rglob("*") if p.is_file()]
        assert any(p.name == "job-environment.json" for p in files)
        for path in files:
            assert SECRET.encode() not in path.read_bytes(), path
        dump = subprocess.run(["pg_dump", "-h", parsed.host or "127.0.0.1", "-p", str(parsed.port or 5432),
                               "-U", parsed.username or "postgres", parsed.database or ""],
                              capture_output=True, text=True, check=True).stdout
        assert "orch.metrics/1" in dump and SECRET not in dump
        envs = [json.loads(p.read_text()) for p in files if p.name == "job-environment.json"]
        assert envs and all("ORCH_DB_URL" not in e and "PGPASSWORD" not in e for e in envs)
    finally:
        next(fresh, None)
