"""One cost definition (issue 27): `orch plan`'s predicted cost and the `cost` view charge a run
for the same devices: on accelerators a benchmark run holds its nodes whole, so a 1-device run on
a 4-device node is charged 4 devices (the view charged 1); a run that shares its node is charged
its own. The site is a local one whose "GPUs" are a stand-in python that writes valid metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_orch, write
from tests.standin import stand_in_python

# The stand-in's figures: 1 TFLOP/s, one timed step.
FIGURES = """\
metrics = {"tflops": 1.0}
timing = {"warmup_steps": 1, "timed_steps": 1}
"""

SITE = """\
name: gpubox
description: a local machine whose 4 "GPUs" are a stand-in python (tests)
scheduler: local
python: {python}
device: {{type: cuda, model: stand-in, per_node: 4, memory_gb: 80, bandwidth_gbs: 2000, peak_tflops: {{fp32: 50}},
         precisions: [fp32]}}
price: {{per_device_hour: 2.5, currency: USD, basis: centre-rate, source: "tests", date: "2026-11"}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: python}}
"""

SWEEP = """\
name: onecost
experiments:
  - name: whole
    workload: gemm
    sites: [gpubox]
    walltime: 10
    grid: {m: 64}
  - name: shared
    workload: gemm
    sites: [gpubox]
    walltime: 10
    share: true
    grid: {m: 64}
"""


def test_the_plan_and_the_cost_view_charge_the_same_devices(workdir: Path) -> None:
    fake = stand_in_python(workdir, FIGURES, device_type="cuda")
    write(workdir / "sites" / "gpubox.yaml", SITE.format(python=fake))
    env = {"ORCH_SITES_PATH": str(workdir / "sites")}
    sweep = write(workdir / "onecost.yaml", SWEEP)
    plan = json.loads(run_orch("plan", str(sweep), "--json", cwd=workdir, env=env, check=True).stdout)
    by_experiment = {r["experiment"]: r for r in plan["runs"]}
    predicted_hours = {name: r["run_s"] / 3600 for name, r in by_experiment.items()}
    # The plan: 4 devices x 2.5 for the run that holds the node, 1 x 2.5 for the shared one.
    assert plan["predicted"]["cost"]["USD"] == pytest.approx(
        predicted_hours["whole"] * 4 * 2.5 + predicted_hours["shared"] * 1 * 2.5, rel=0.02)
    run_orch("run", str(sweep), "--interval", "0.5", cwd=workdir, env=env, check=True)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT experiment, devices, charged_devices, cost_per_hour, "
                               "cost_per_result, elapsed_s FROM cost ORDER BY experiment", cwd=workdir, env=env,
                               check=True).stdout)
    got = {r["experiment"]: r for r in rows}
    assert (got["whole"]["devices"], got["whole"]["charged_devices"], got["whole"]["cost_per_hour"]) == (1, 4, 10.0)
    assert (got["shared"]["devices"], got["shared"]["charged_devices"], got["shared"]["cost_per_hour"]) == (1, 1, 2.5)
    for row in rows:
        assert row["cost_per_result"] == pytest.approx(row["cost_per_hour"] * row["elapsed_s"] / 3600)
