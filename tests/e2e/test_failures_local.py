"""Failure classes and retries on the local site, with a user site whose "python" misbehaves on cue.

The site is added the way users add one: a YAML file in a directory given with --sites-dir.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import run_orch, write

FAKE_PYTHON = """#!/bin/bash
# Stands in for python: behaves as the --tag value says, else runs the real interpreter.
mode=""; prev=""
for arg in "$@"; do [ "$prev" = "--tag" ] && mode="$arg"; prev="$arg"; done
case "$mode" in
  exit3) echo "failing on purpose" >&2; exit 3 ;;
  nometrics) exit 0 ;;
  badmetrics) printf '{"schema": "orch.metrics/1", "workload": "gemm", "metr' > metrics.json; exit 0 ;;
  nan) exec {real} - "$@" <<'PY'
import json
json.dump({"schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 1,
           "device": {"type": "cpu", "model": "x", "count": 1}, "metrics": {"tflops": float("nan")},
           "timing": {"warmup_steps": 1, "timed_steps": 1}}, open("metrics.json", "w"))
PY
  ;;
  sleep) sleep 600 ;;
  killed) kill -9 $$ ;;
  flaky) if [ ! -e first-try ]; then touch first-try; exit 3; fi; exec {real} "$@" ;;
  *) exec {real} "$@" ;;
esac
"""

SITE = """\
name: flaky
description: The local machine with a python that fails on cue (tests only).
scheduler: local
python: {python}
device: {{type: cpu, model: host-cpu, per_node: 2, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: torchrun}}
"""

SWEEP = """\
name: failures
retry: {max_attempts: 1}
experiments:
  - name: once
    workload: gemm
    sites: [flaky]
    walltime: "00:00:25"   # long enough for a loaded machine; "sleep" still runs past it
    grid:
      m: 32
      warmup: 1
      iters: 2
      tag: [exit3, nometrics, badmetrics, nan, sleep, killed, ok]
  - name: retried
    workload: gemm
    sites: [flaky]
    retry: {max_attempts: 3, failures: [failed]}
    grid: {m: 32, warmup: 1, iters: 2, tag: flaky}
"""


def test_each_failure_lands_with_its_class_and_retries_follow_policy(workdir: Path) -> None:
    fake = write(workdir / "fake-python", FAKE_PYTHON.replace("{real}", sys.executable))
    fake.chmod(0o755)
    write(workdir / "mysites" / "flaky.yaml", SITE.format(python=fake))
    sweep = write(workdir / "s.yaml", SWEEP)
    proc = run_orch("--sites-dir", str(workdir / "mysites"), "run", str(sweep), "--interval", "0.5", cwd=workdir)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some runs failed: the exit code says so

    rows = json.loads(run_orch("sql", "-f", "json",
                               "SELECT json_extract(params, '$.tag') AS tag, attempt, status, failure_class, "
                               "exit_code, tflops FROM results ORDER BY tag, attempt", cwd=workdir, check=True).stdout)
    got = {(r["tag"], r["attempt"]): (r["status"], r["failure_class"], r["exit_code"]) for r in rows}
    assert got[("exit3", 1)] == ("failed", "failed", 3)
    assert got[("nometrics", 1)] == ("failed", "missing_metrics", 0)
    assert got[("badmetrics", 1)] == ("failed", "bad_metrics", 0)
    assert got[("nan", 1)] == ("failed", "bad_metrics", 0)
    assert got[("sleep", 1)][:2] == ("failed", "timeout")
    assert got[("killed", 1)] == ("failed", "out_of_memory", 137)  # SIGKILL, not from orch: the OOM killer
    assert got[("ok", 1)] == ("completed", None, 0)
    # The flaky run failed once, was retried by policy, and then completed.
    assert got[("flaky", 1)] == ("failed", "failed", 3) and got[("flaky", 2)] == ("completed", None, 0)
    assert ("flaky", 3) not in got
    # Runs with max_attempts 1 were not retried.
    assert ("exit3", 2) not in got

    reasons = json.loads(run_orch("sql", "-f", "json",
                                  "SELECT a.reason FROM attempts a JOIN runs r ON r.id = a.run_id "
                                  "WHERE a.failure_class = 'bad_metrics' ORDER BY a.reason", cwd=workdir).stdout)
    assert any("not valid JSON" in r["reason"] for r in reasons)
    assert any("NaN is not a number" in r["reason"] for r in reasons)
    runs = json.loads(run_orch("sql", "-f", "json", "SELECT status, count(*) AS n FROM runs GROUP BY status "
                               "ORDER BY status", cwd=workdir).stdout)
    assert {r["status"]: r["n"] for r in runs} == {"failed": 6, "finished": 2}

    # `orch status --failed` answers "what failed and why, and where is its log" in one command.
    listed = json.loads(run_orch("status", "--failed", "--json", cwd=workdir, check=True).stdout)["runs"]
    by_tag = {}
    for run in listed:
        spec = json.loads(Path(run["log"]).with_name("spec.json").read_text())
        by_tag[spec["params"]["tag"]] = run
    assert {t: r["failure_class"] for t, r in by_tag.items()} == {
        "exit3": "failed", "nometrics": "missing_metrics", "badmetrics": "bad_metrics", "nan": "bad_metrics",
        "sleep": "timeout", "killed": "out_of_memory"}
    assert all(r["status"] == "failed" and r["reason"] and r["attempt"] == 1 for r in listed)
    assert "failing on purpose" in Path(by_tag["exit3"]["log"]).read_text()
    assert by_tag["exit3"]["exit_code"] == 3 and by_tag["exit3"]["reason"] == "script exited with 3"
    text = run_orch("status", "--failed", cwd=workdir, env={"COLUMNS": "100"}, check=True).stdout
    assert "out_of_memory (exit 137)" in text and "reason: script exited with 3" in text
    assert f"log: {by_tag['exit3']['log']}" in text  # the whole path on its line, never wrapped
