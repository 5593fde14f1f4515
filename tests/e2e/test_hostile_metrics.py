"""One bad metrics file must not stop the rest: a poll in which several runs ended, some of them
with hostile metrics files (an integer beyond 64 bits, JSON nested 100,000 deep, 200 MB, a symlink
to /dev/zero, a FIFO, NaN, lax values, duplicate keys), collects every good run and refuses each bad
one with its reason, and `orch status` returns promptly (a FIFO once blocked it forever)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

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
if mode == "huge":
    with open(out, "wb") as f:
        f.truncate(200 * 1024 * 1024)  # 200 MB (sparse: cheap to make, not to read)
elif mode == "symlink":
    os.symlink("/dev/zero", out)
elif mode == "fifo":
    os.mkfifo(out)
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
