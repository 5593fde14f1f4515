"""Two `orch submit` processes at once on one database never submit a run twice (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.conftest import write

SITE = """\
name: quick
description: local jobs whose program does nothing (submission tests)
scheduler: local
python: /bin/true
device: {type: cpu, model: host-cpu, per_node: 1, precisions: [fp32]}
queues: [{name: local, max_nodes: 1, max_walltime: "01:00:00"}]
launcher: {name: python}
"""

SWEEP = """\
name: race
experiments:
  - name: many
    workload: gemm
    sites: [quick]
    grid: {m: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24]}
"""


def _orch(workdir: Path, db_url: str, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ORCH_DB_URL=db_url, ORCH_SITES_PATH=str(workdir / "sites"))
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_concurrent_submits_submit_each_run_once(workdir: Path, db_url: str) -> None:
    write(workdir / "sites" / "quick.yaml", SITE)
    sweep = write(workdir / "s.yaml", SWEEP)
    plan = _orch(workdir, db_url, "plan", str(sweep))
    assert plan.wait(120) == 0, plan.stderr.read() if plan.stderr else ""

    racers = [_orch(workdir, db_url, "submit", "--json") for _ in range(2)]
    outputs = [r.communicate(timeout=300) for r in racers]
    # Each racer submitted some or (exit 1, saying so) none: the other took them all.
    assert sorted(r.returncode for r in racers) in ([0, 0], [0, 1]), outputs
    submitted = [{s["run_id"] for s in json.loads(out)["submitted"]} for out, _ in outputs]
    assert not (submitted[0] & submitted[1])
    assert len(submitted[0] | submitted[1]) == 24

    engine = create_engine(db_url)
    with engine.connect() as conn:
        attempts = conn.execute(text("SELECT run_id, count(*) FROM attempts GROUP BY run_id")).all()
        statuses = conn.execute(text("SELECT DISTINCT status FROM runs")).scalars().all()
    engine.dispose()
    assert len(attempts) == 24 and all(n == 1 for _, n in attempts)
    assert set(statuses) <= {"submitted", "running"}

    follow = _orch(workdir, db_url, "status", "--watch", "--interval", "0.5", "--json")
    out, err = follow.communicate(timeout=300)
    assert follow.returncode == 0, err
    # /bin/true wrote no metrics: every run ends, classified, none lost.
    assert json.loads(out)["counts"] == {"failed": 24}


METRICS_PYTHON = """#!{python}
import json, sys
a = sys.argv[1:]
json.dump({{"schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 1,
           "device": {{"type": "cpu", "model": "x", "count": 1}}, "metrics": {{"tflops": 1.0}},
           "timing": {{"warmup_steps": 0, "timed_steps": 1}}}}, open(a[a.index("--output") + 1], "w"))
"""


def test_two_concurrent_status_watchers_record_each_end_once(workdir: Path, db_url: str) -> None:
    fake = write(workdir / "fake-python", METRICS_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    write(workdir / "sites" / "quick.yaml", SITE.replace("python: /bin/true", f"python: {fake}"))
    sweep = write(workdir / "s.yaml", SWEEP)
    for args in (("plan", str(sweep)), ("submit",)):
        proc = _orch(workdir, db_url, *args)
        assert proc.wait(300) == 0
    watchers = [_orch(workdir, db_url, "status", "--watch", "--interval", "0.2", "--json") for _ in range(2)]
    outputs = [w.communicate(timeout=300) for w in watchers]
    assert all(w.returncode == 0 for w in watchers), [err for _, err in outputs]
    assert all(json.loads(out)["counts"] == {"finished": 24} for out, _ in outputs)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM metrics")).scalar_one() == 24
        assert conn.execute(text("SELECT count(*) FROM attempts")).scalar_one() == 24
        assert conn.execute(text("SELECT count(*) FROM results WHERE status = 'completed'")).scalar_one() == 24
    engine.dispose()
