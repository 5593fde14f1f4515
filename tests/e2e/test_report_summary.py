"""The report for management (issue 27): its first section is the summary (the best figure per
system and precision, with performance per price), training and inference never share a figure,
and a superlinear point from a single repeat is flagged. The workloads' python is a stand-in that
writes chosen throughputs (from its run's spec.json), so the figures are known in advance."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import run_orch, write
from tests.e2e.test_report import figure_sections, table_rows
from tests.standin import stand_in_python

# tokens/s by workload and devices: gpt2 scales superlinearly (3x on 2 devices), inference does not.
THROUGHPUT = {"gpt2": {1: 100.0, 2: 300.0}, "llm_inference": {1: 50.0, 2: 80.0}}

# The stand-in's figures: the table's tokens/s for the run's workload and devices.
FIGURES = """\
metrics = {{"tokens_per_s": {throughput}[spec["workload"]][str(spec["devices"])]}}
timing = {{"warmup_steps": 1, "timed_steps": 1}}
"""

SITE = """\
name: standin
description: the local machine with a python that writes chosen throughputs (tests)
scheduler: local
python: {python}
device: {{type: cpu, model: stand-in, per_node: 2, precisions: [fp32]}}
price: {{per_device_hour: 1.0, currency: USD, basis: local-estimate, source: "tests", date: "2026-11"}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: torchrun}}
"""

SWEEP = """\
name: mgmt
experiments:
  - name: train
    workload: gpt2
    sites: [standin]
    walltime: 10
    share: true
    grid: {model: tiny, devices: [1, 2], batch_size: 2, seq_len: 32, strategy: ddp}
  - name: serve
    workload: llm_inference
    sites: [standin]
    walltime: 10
    share: true
    grid: {model: tiny, devices: [1, 2]}
"""


def test_summary_first_inference_apart_and_superlinear_single_repeats_flagged(workdir: Path) -> None:
    table = json.dumps({w: {str(d): v for d, v in t.items()} for w, t in THROUGHPUT.items()})
    fake = stand_in_python(workdir, FIGURES.format(throughput=table))
    write(workdir / "sites" / "standin.yaml", SITE.format(python=fake))
    env = {"ORCH_SITES_PATH": str(workdir / "sites"), "ORCH_LOCAL_CORES": "4", "ORCH_MEMORY_TRACE": "0"}
    ran = run_orch("run", str(write(workdir / "mgmt.yaml", SWEEP)), "--interval", "0.5", "--json", cwd=workdir,
                   env=env, check=True)
    # The axis compared is never dropped: orch run's results name the strategy (issue 27).
    assert {r["workload"]: r["strategy"] for r in json.loads(ran.stdout)}["gpt2"] == "ddp"
    run_orch("report", "-o", "report.html", cwd=workdir, env=env, check=True)
    html = (workdir / "report.html").read_text()
    sections = figure_sections(html)
    assert list(sections)[0] == "summary", list(sections)
    # The best figure of each workload on the one system, per device (issue 53: by the total, a
    # system that ran on more devices won): gpt2's 2-device run (300 tokens/s, 150 a device) and
    # llm_inference's 1-device run (50 a device; its 2-device run made 80, 40 a device).
    rows = table_rows(html, "summary")
    assert sorted((float(r["best-per-device"]), float(r["best-mean"])) for r in rows) == [(50.0, 50.0), (150.0, 300.0)]
    assert re.search(r"per_price_unit", sections["summary"]) and "USD/hour" in sections["summary"]
    # Training and inference: each in its own figure, never on one figure's axes.
    train, serve = sections["scaling"], sections["scaling-inference"]
    assert "gpt2" in train and "llm_inference" not in train
    assert "llm_inference" in serve and "gpt2" not in serve
    flagged = [r for r in table_rows(html, "scaling") if r.get("flags")]
    assert len(flagged) == 1 and float(flagged[0]["efficiency"]) == 1.5
    assert "superlinear" in flagged[0]["flags"] and "single repeat" in flagged[0]["flags"]
    assert "efficiency 1.50 &gt; 1 (superlinear) from a single repeat" in train  # said in the figure's notes
    assert re.search(r"<td>gpt2 fp32 ddp 2dev</td>", html)  # the provenance rows name it too
    inference_rows = table_rows(html, "scaling-inference")
    assert [float(r["efficiency"]) for r in inference_rows if r.get("devices") == "2"] == [0.8]
