"""Study A Fig. 6b-c (examples/A-fig6bc-grad-accumulation.yaml): the GAS sweep reaches the SN30 and IPU
vendor commands at full size, and its tiny variant runs on local with the gpt2 workload's own
accumulation, each run's per-step loss stored in metric_series (the loss_curve figure's data)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO, run_orch
from tests.e2e.test_example_systems import placeholder_env

EXAMPLE = REPO / "examples" / "A-fig6bc-grad-accumulation.yaml"
FLAGS = {"sambanova": "--gradient_accumulation_steps", "graphcore": "--gradient-accumulation"}


def sql(workdir: Path, query: str, env: dict[str, str]) -> list[dict]:
    return json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, env=env, check=True).stdout)


def test_full_size_plans_every_gas_on_both_vendors(workdir: Path) -> None:
    env = placeholder_env()
    run_orch("plan", str(EXAMPLE), cwd=workdir, env=env, check=True)
    runs = sql(workdir, "SELECT system, status, strategy, params, script FROM runs", env)
    assert {r["system"] for r in runs} == {"sambanova", "graphcore"} and all(r["status"] == "planned" for r in runs)
    assert {r["system"]: r["strategy"] for r in runs} == {"sambanova": "vendor-dp", "graphcore": "vendor-pipeline-dp"}
    for system, flag in FLAGS.items():
        mine = {json.loads(r["params"])["grad_accum"]: r["script"] for r in runs if r["system"] == system}
        assert sorted(mine) == [1, 4, 8, 16, 32]
        for accum, script in mine.items():
            if system == "sambanova" and accum == 1:
                assert flag not in script  # the documented command, unchanged
            else:
                assert f"{flag} {accum} " in script, (system, accum)


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
