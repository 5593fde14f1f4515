"""The inference view (migration 0013): its counts are integers, not the floats metric_values holds
(issue 27), and a TTFT p99 from fewer than 100 timed iterations (p90 from fewer than 10) carries a
note that `orch run`'s table and the report show. The workload's python is a stand-in that writes
an llm_inference metrics file with as many timed steps as the run's iters."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import run_orch, write
from tests.e2e.test_report import table_rows
from tests.standin import stand_in_python

# The stand-in's figures: an inference run of 4 users, 32 tokens in, 6 out.
FIGURES = """\
metrics = {"concurrency": 4, "input_len": 32, "output_len": 6, "ttft_p50_s": 0.01, "ttft_p90_s": 0.02,
           "ttft_p99_s": 0.03, "tpot_s": 0.001, "output_tokens_per_s": 100.0, "tokens_per_s": 100.0}
timing = {"warmup_steps": 1, "timed_steps": iters, "step_times_s": [0.05] * iters}
"""

SITE = """\
name: standin
description: the local machine with a python that writes chosen figures (tests)
scheduler: local
python: {python}
device: {{type: cpu, model: stand-in, per_node: 1, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: torchrun}}
"""

SWEEP = """\
name: few
experiments:
  - name: serve
    workload: llm_inference
    sites: [standin]
    walltime: 10
    share: true
    grid: {model: tiny, iters: [5, 50, 200]}
"""


def test_inference_counts_are_integers_and_a_p99_of_few_samples_is_flagged(workdir: Path) -> None:
    fake = stand_in_python(workdir, FIGURES)
    write(workdir / "sites" / "standin.yaml", SITE.format(python=fake))
    env = {"ORCH_SITES_PATH": str(workdir / "sites"), "ORCH_LOCAL_CORES": "2", "ORCH_MEMORY_TRACE": "0"}
    ran = run_orch("run", str(write(workdir / "few.yaml", SWEEP)), "--interval", "0.5", "--json", cwd=workdir,
                   env=env, check=True)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT * FROM inference ORDER BY ttft_samples",
                               cwd=workdir, check=True).stdout)
    assert [r["ttft_samples"] for r in rows] == [5, 50, 200]
    for row in rows:  # integers in JSON: 4, not 4.0
        assert all(type(row[c]) is int for c in ("concurrency", "input_len", "output_len", "ttft_samples")), row
        assert (row["concurrency"], row["input_len"], row["output_len"]) == (4, 32, 6)
    notes = [r["p99_note"] for r in rows]
    assert notes == ["p90 and p99 from 5 samples: too few (p90 needs ~10, p99 ~100)",
                     "p99 from 50 samples: too few (~100 needed)", None]
    # orch run's results say it beside the run; the report's inference table too.
    by_run = {r["run_id"]: r.get("note") for r in json.loads(ran.stdout)}
    assert sorted(by_run.values(), key=str) == sorted(notes, key=str)
    table = run_orch("run", str(workdir / "few.yaml"), cwd=workdir, env={**env, "COLUMNS": "250"}, check=True).stdout
    assert "note" in table and "p99 from 50 samples" in table
    run_orch("report", "-o", "report.html", cwd=workdir, env=env, check=True)
    html = (workdir / "report.html").read_text()
    assert sorted(r["ttft-samples"] for r in table_rows(html, "inference")) == ["200", "5", "50"]
    table_html = re.search(r'<table class="data" data-figure="inference">(.*?)</table>', html, re.S)
    assert table_html is not None
    reported = sorted(re.findall(r'data-p99-note="([^"]*)"', table_html[1]))  # table_rows' names have no digits
    assert reported == ["p90 and p99 from 5 samples: too few (p90 needs ~10, p99 ~100)",
                        "p99 from 50 samples: too few (~100 needed)"], reported
    assert "too few timed iterations for their TTFT p99" in html
