"""Study A Fig. 6b-c (examples/A-fig6bc-grad-accumulation.yaml): the GAS sweep reaches the SN30 and IPU
vendor commands at full size, and its tiny variant runs on local with the gpt2 workload's own
accumulation, each run's per-step loss stored in metric_series (the loss_curve figure's data)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO, run_orch
from tests.e2e.test_example_systems import placeholder_env

EXAMPLE = REPO / "examples" / "A-fig6bc-grad-accumulation.yaml"
# Each vendor's machine (the study's: the Testbed's SN30, and a POD16, study-setups.yaml 000-E8) and its flag.
FLAGS = {"alcf-ai-testbed:sambanova": "--gradient_accumulation_steps", "graphcore-pod16": "--gradient-accumulation"}
GAS = {"alcf-ai-testbed:sambanova": [1, 4, 8, 16], "graphcore-pod16": [16, 64, 256, 1024, 2048]}


def sql(workdir: Path, query: str, env: dict[str, str]) -> list[dict]:
    return json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, env=env, check=True).stdout)


def test_full_size_plans_every_gas_on_both_vendors(workdir: Path) -> None:
    env = placeholder_env()
    run_orch("plan", str(EXAMPLE), cwd=workdir, env=env, check=True)
    runs = sql(workdir, "SELECT site, system, status, strategy, params, script FROM runs", env)
    for r in runs:
        r["machine"] = f"{r['site']}:{r['system']}" if r["system"] else r["site"]
    assert {r["machine"] for r in runs} == set(FLAGS) and all(r["status"] == "planned" for r in runs)
    assert {r["machine"]: r["strategy"] for r in runs} == {"alcf-ai-testbed:sambanova": "vendor-dp",
                                                           "graphcore-pod16": "vendor-pipeline-dp"}
    for machine, flag in FLAGS.items():
        mine = {json.loads(r["params"])["grad_accum"]: r["script"] for r in runs if r["machine"] == machine}
        assert sorted(mine) == GAS[machine]
        for accum, script in mine.items():
            if machine == "alcf-ai-testbed:sambanova" and accum == 1:
                assert flag not in script  # the documented command, unchanged
            else:
                assert f"{flag} {accum} " in script, (machine, accum)


def test_tiny_variant_runs_with_the_workloads_accumulation_and_stores_the_loss(workdir: Path) -> None:
    env = {"OMP_NUM_THREADS": "1"}
    proc = run_orch("run", str(EXAMPLE), "--variant", "tiny", "--interval", "0.5", cwd=workdir, env=env,
                    timeout=480)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = sql(workdir, "SELECT experiment, status, params, tokens_per_s FROM results ORDER BY experiment", env)
    assert [(r["experiment"], r["status"]) for r in rows] == [("gas-ipu", "completed"), ("gas-sn30", "completed"),
                                                            ("gas-sn30", "completed")]
    assert sorted(json.loads(r["params"])["grad_accum"] for r in rows) == [1, 4, 4]
    points = sql(workdir, "SELECT a.run_id, COUNT(*) AS n, MIN(ms.step) AS first, MAX(ms.step) AS last "
                          "FROM metric_series ms JOIN attempts a ON a.id = ms.attempt_id "
                          "WHERE ms.name = 'loss' GROUP BY a.run_id", env)
    assert len(points) == 3 and all((p["n"], p["first"], p["last"]) == (3, 1, 3) for p in points)
