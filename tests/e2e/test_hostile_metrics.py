"""One bad metrics file must not stop the rest: a poll in which several runs ended, some of them
with hostile metrics files (an integer beyond 64 bits, JSON nested 100,000 deep, 200 MB, a symlink
to /dev/zero, a FIFO, NaN, lax values, duplicate keys), collects every good run and refuses each bad
one with its reason, and `orch status` returns promptly (a FIFO once blocked it forever).

Round 2, on SQLite and PostgreSQL alike: values that do not fit their database columns (too long,
a NUL character, an integer beyond the column's type), metrics whose square overflows statistics,
a hard-linked metrics file and a run folder replaced by a symbolic link are each refused alone (on
PostgreSQL one such file once failed every poll); a FIFO as a job's started file, as a sweep file
or as `orch sql --file` is refused instead of hanging orch."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_orch, write

# Stands in for python: the job's workload writes the metrics file the --tag value names.
FAKE_PYTHON = """#!/bin/bash
mode=""; prev=""; out=""
for arg in "$@"; do [ "$prev" = "--tag" ] && mode="$arg"; [ "$prev" = "--output" ] && out="$arg"; prev="$arg"; done
case "$mode" in
  ok*) exec {real} "$@" ;;
  *) exec {real} - "$mode" "$out" <<'PY'
import json, os, sys
mode, out = sys.argv[1], sys.argv[2]
good = {"schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 1,
        "device": {"type": "cpu", "model": "x", "count": 1}, "metrics": {"tflops": 1.0},
        "timing": {"warmup_steps": 1, "timed_steps": 1}}
text = json.dumps(good)
if mode == "bigint":
    text = text.replace('"world_size": 1', '"world_size": 9223372036854775808')
elif mode == "deep":
    text = text[:-1] + ', "extra": ' + "[" * 100000 + "]" * 100000 + "}"
elif mode == "nan":
    text = text.replace('"tflops": 1.0', '"tflops": NaN')
elif mode == "booltflops":
    text = text.replace('"tflops": 1.0', '"tflops": true')
elif mode == "strtflops":
    text = text.replace('"tflops": 1.0', '"tflops": "1e3"')
elif mode == "dupkey":
    text = text.replace('"tflops": 1.0', '"tflops": 1.0, "tflops": 9.0')
# Valid JSON whose values do not fit their database columns (models.py), or overflow statistics.
column_cases = {
    "longmodel": lambda doc: doc["device"].update(model="m" * 201),
    "longname": lambda doc: doc["metrics"].update({"n" * 101: 1.0}),
    "longpython": lambda doc: doc.update(env={"python": "3" * 51}),
    "longgitrev": lambda doc: doc.update(env={"git_rev": "a" * 81}),
    "nulname": lambda doc: doc["metrics"].update({"a\\x00b": 1.0}),
    "nulmodel": lambda doc: doc["device"].update(model="x\\x00y"),
    "nulhost": lambda doc: doc.update(env={"hostname": "h\\x00"}),
    "hugemetric": lambda doc: doc["metrics"].update(tflops=1e308),
    "bigworld": lambda doc: doc.update(world_size=2**31),
}
if mode in column_cases:
    column_cases[mode](good)
    text = json.dumps(good)
if mode == "huge":
    with open(out, "wb") as f:
        f.truncate(200 * 1024 * 1024)  # 200 MB (sparse: cheap to make, not to read)
elif mode == "symlink":
    os.symlink("/dev/zero", out)
elif mode == "fifo":
    os.mkfifo(out)
elif mode == "hardlink":  # another file's numbers under this run's name
    with open(out + ".other", "w") as f:
        f.write(text)
    os.link(out + ".other", out)
elif mode == "symlinkdir":  # the run folder replaced by a link to a folder that holds numbers
    run_dir = os.path.dirname(os.path.abspath(out))
    os.mkdir(run_dir + "-elsewhere")
    with open(os.path.join(run_dir + "-elsewhere", "metrics.json"), "w") as f:
        f.write(text)
    os.rename(run_dir, run_dir + "-moved")
    os.symlink(run_dir + "-elsewhere", run_dir)
elif mode == "fifostarted":  # the job's started file (jobs/<site>/started/<job id>) becomes a FIFO
    import pathlib, time
    started = pathlib.Path(out).resolve().parents[3] / "jobs" / "hostile" / "started"
    for marker in list(started.iterdir()):
        marker.unlink()
        os.mkfifo(marker)
    release = pathlib.Path(out + ".release")
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    with open(out, "w") as f:
        f.write(text)
else:
    with open(out, "w") as f:
        f.write(text)
PY
  ;;
esac
"""

SITE = """\
name: hostile
description: The local machine with a python that writes hostile metrics files (tests only).
scheduler: local
python: {python}
device: {{type: cpu, model: host-cpu, per_node: 1, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: python}}
"""

BAD = {
    "bigint": "world_size: Input should be less than or equal to 9223372036854775807",
    "deep": "nested too deeply",
    "huge": "over the 16 MiB limit",
    "symlink": "a symbolic link (not followed)",
    "fifo": "not a regular file",
    "nan": "NaN is not a number",
    "booltflops": "metrics.tflops: Input should be a valid number",
    "strtflops": "metrics.tflops: Input should be a valid number",
    "dupkey": "duplicate key 'tflops'",
}
GOOD = ["ok1", "ok2", "ok3"]

SWEEP = f"""\
name: hostile
experiments:
  - name: poll
    workload: gemm
    sites: [hostile]
    walltime: "00:05:00"
    grid: {{m: 16, n: 16, k: 16, warmup: 1, iters: 2, tag: {json.dumps(list(BAD) + GOOD)}}}
"""


def test_one_poll_collects_every_good_run_and_refuses_each_hostile_file_alone(workdir: Path) -> None:
    fake = write(workdir / "fake-python", FAKE_PYTHON.replace("{real}", sys.executable))
    fake.chmod(0o755)
    write(workdir / "mysites" / "hostile.yaml", SITE.format(python=fake))
    sweep = write(workdir / "s.yaml", SWEEP)
    orch = ("--sites-dir", str(workdir / "mysites"))
    run_orch(*orch, "plan", str(sweep), cwd=workdir, check=True)
    submitted = json.loads(run_orch(*orch, "submit", "--json", cwd=workdir, check=True).stdout)
    total = len(BAD) + len(GOOD)
    assert len(submitted["submitted"]) == total

    # Every job ends before anyone polls, so one poll meets all the files at once.
    jobs = workdir / ".orch" / "jobs" / "hostile"
    deadline = time.monotonic() + 300
    while len(list(jobs.glob("*_result.pkl"))) < total:
        assert time.monotonic() < deadline, "the jobs did not end"
        time.sleep(0.5)

    started = time.monotonic()
    proc = run_orch(*orch, "status", "--json", cwd=workdir, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - started < 120
    report = json.loads(proc.stdout)
    assert report["polls"] == 1
    assert report["counts"] == {"finished": len(GOOD), "failed": len(BAD)}

    rows = json.loads(run_orch("sql", "-f", "json",
                               "SELECT json_extract(r.params, '$.tag') AS tag, a.state, a.failure_class, a.reason, "
                               "m.tflops FROM attempts a JOIN runs r ON r.id = a.run_id "
                               "LEFT JOIN metrics m ON m.attempt_id = a.id", cwd=workdir, check=True).stdout)
    by_tag = {row["tag"]: row for row in rows}
    for tag in GOOD:
        assert by_tag[tag]["state"] == "completed" and by_tag[tag]["tflops"] is not None, by_tag[tag]
    for tag, reason in BAD.items():
        row = by_tag[tag]
        assert (row["state"], row["failure_class"]) == ("failed", "bad_metrics"), row
        assert reason in row["reason"], row
        assert row["tflops"] is None  # nothing of a refused file is stored
    results = json.loads(run_orch("sql", "-f", "json", "SELECT count(*) AS n FROM results WHERE status = 'completed'",
                                  cwd=workdir, check=True).stdout)
    assert results == [{"n": len(GOOD)}]


COLUMN_BAD = {
    "longmodel": "device.model: 201 characters, over the 200 its database column (device_model) holds",
    "longname": "101 characters, over the 100 its database column (name) holds",
    "longpython": "env.python: 51 characters, over the 50 its database column (python) holds",
    "longgitrev": "env.git_rev: 81 characters, over the 80 its database column (code_revision) holds",
    "nulname": "metrics: the name 'a\\x00b': contains a NUL character",
    "nulmodel": "device.model: contains a NUL character",
    "nulhost": "env.hostname: contains a NUL character",
    "hugemetric": "metric 'tflops' is 1e+308, beyond 1e+60",
    "bigworld": "world_size: 2147483648 is beyond the 32-bit integers",
    "hardlink": "a file with 2 hard links (not read",
    "symlinkdir": "is a symbolic link (not followed)",
}


def _hostile_site(workdir: Path) -> tuple[str, ...]:
    fake = write(workdir / "fake-python", FAKE_PYTHON.replace("{real}", sys.executable))
    fake.chmod(0o755)
    write(workdir / "mysites" / "hostile.yaml", SITE.format(python=fake))
    return ("--sites-dir", str(workdir / "mysites"))


def _sweep(tags: list[str]) -> str:
    return SWEEP.replace(json.dumps(list(BAD) + GOOD), json.dumps(tags))


def _wait_for_results(workdir: Path, total: int) -> None:
    jobs = workdir / ".orch" / "jobs" / "hostile"
    deadline = time.monotonic() + 300
    while len(list(jobs.glob("*_result.pkl"))) < total:
        assert time.monotonic() < deadline, "the jobs did not end"
        time.sleep(0.5)


def test_values_that_do_not_fit_their_columns_are_refused_alone_on_every_backend(workdir: Path, db_url: str) -> None:
    db = {"ORCH_DB_URL": db_url}
    orch = _hostile_site(workdir)
    sweep = write(workdir / "s.yaml", _sweep(list(COLUMN_BAD) + GOOD))
    run_orch(*orch, "plan", str(sweep), cwd=workdir, env=db, check=True)
    submitted = json.loads(run_orch(*orch, "submit", "--json", cwd=workdir, env=db, check=True).stdout)
    total = len(COLUMN_BAD) + len(GOOD)
    assert len(submitted["submitted"]) == total
    _wait_for_results(workdir, total)  # one poll meets every file

    proc = run_orch(*orch, "status", "--json", cwd=workdir, env=db, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["polls"] == 1
    assert report["counts"] == {"finished": len(GOOD), "failed": len(COLUMN_BAD)}

    rows = json.loads(run_orch("sql", "-f", "json",
                               "SELECT r.params, a.state, a.failure_class, a.reason, m.tflops FROM attempts a "
                               "JOIN runs r ON r.id = a.run_id LEFT JOIN metrics m ON m.attempt_id = a.id",
                               cwd=workdir, env=db, check=True).stdout)
    by_tag = {json.loads(row["params"])["tag"]: row for row in rows}
    for tag in GOOD:
        assert by_tag[tag]["state"] == "completed" and by_tag[tag]["tflops"] is not None, by_tag[tag]
    for tag, reason in COLUMN_BAD.items():
        row = by_tag[tag]
        assert (row["state"], row["failure_class"]) == ("failed", "bad_metrics"), row
        assert reason in row["reason"], row
        assert row["tflops"] is None
    stored = json.loads(run_orch("sql", "-f", "json",
                                 "SELECT a.state, count(*) AS n, max(v.value) AS top FROM metric_values v "
                                 "JOIN attempts a ON a.id = v.attempt_id GROUP BY a.state",
                                 cwd=workdir, env=db, check=True).stdout)
    assert [row["state"] for row in stored] == ["completed"], stored  # nothing of a refused file
    assert stored[0]["top"] < 1e100, stored
    results = json.loads(run_orch("sql", "-f", "json", "SELECT count(*) AS n FROM results WHERE status = 'completed'",
                                  cwd=workdir, env=db, check=True).stdout)
    assert results == [{"n": len(GOOD)}]


def test_a_fifo_as_the_started_file_does_not_hang_status(workdir: Path, db_url: str) -> None:
    db = {"ORCH_DB_URL": db_url}
    orch = _hostile_site(workdir)
    sweep = write(workdir / "s.yaml", _sweep(["fifostarted"]))
    run_orch(*orch, "plan", str(sweep), cwd=workdir, env=db, check=True)
    run_orch(*orch, "submit", cwd=workdir, env=db, check=True)
    started = workdir / ".orch" / "jobs" / "hostile" / "started"
    deadline = time.monotonic() + 120
    while not any(stat.S_ISFIFO(p.lstat().st_mode) for p in started.glob("*")):
        assert time.monotonic() < deadline, "the job did not make its FIFO"
        time.sleep(0.2)
    run_dirs = list((workdir / ".orch" / "runs").glob("*/*"))
    try:
        proc = run_orch(*orch, "status", "--json", cwd=workdir, env=db, timeout=60)  # hung forever before
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["counts"] == {"running": 1}
    finally:
        for run_dir in run_dirs:  # the job then writes its metrics and ends
            (run_dir / "metrics.json.release").touch()
    _wait_for_results(workdir, 1)
    proc = run_orch(*orch, "status", "--json", cwd=workdir, env=db, timeout=60)
    assert json.loads(proc.stdout)["counts"] == {"finished": 1}, proc.stdout + proc.stderr


@pytest.mark.parametrize("command", [("plan",), ("sql", "--file")])
def test_a_fifo_as_the_sweep_file_or_query_file_is_refused_not_waited_on(
        workdir: Path, db_url: str, command: tuple[str, ...]) -> None:
    fifo = workdir / "input.fifo"
    os.mkfifo(fifo)
    proc = run_orch(*command, str(fifo), cwd=workdir, env={"ORCH_DB_URL": db_url}, timeout=30)  # hung before
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a regular file" in proc.stderr, proc.stderr
