"""A run skipped for memory says what would fit instead (issue 27: `orch predict` knew, the plan
did not): the largest micro-batch, else a sharded strategy, else "nothing smaller fits", from the
same predictions as the skip and a handful of them at most."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write


def _reasons(tmp_path: Path, body: str) -> dict[str, str]:
    sweep = write(tmp_path / "s.yaml", "name: fit\nexperiments:\n" + body)
    proc = run_orch("plan", str(sweep), "--dry-run", "--json", cwd=tmp_path, check=True,
                    env={"ORCH_ACCOUNT": "proj", "ORCH_MEMORY_TRACE": "0"})  # the formulas: no trace
    return {f"{r['experiment']}/{r['devices']}/{r['params']}": r["reason"] for r in json.loads(proc.stdout)["runs"]}


def test_the_largest_micro_batch_that_fits_is_named(tmp_path: Path) -> None:
    from orchestrator.predict.formulas import bert

    [reason] = _reasons(tmp_path, "  - name: b\n    workload: bert\n    sites: [polaris]\n    walltime: 600\n"
                                  "    grid: {size: large, batch_size: 4096, seq_len: 512}\n").values()
    assert reason.startswith("predicted to need ") and "A100-SXM4-40GB has 40 GB; batch_size " in reason, reason
    fits = reason.split("; batch_size ")[1]  # "38 fits (39.2 GB), 39 does not"
    best, above = int(fits.split()[0]), int(fits.split(", ")[1].split()[0])
    assert above == best + 1 and fits.endswith(f"{above} does not")

    def per_device_gb(batch: int) -> float:  # polaris: 1 GB fixed per device (sites/polaris.yaml)
        return bert({"size": "large", "batch_size": batch, "seq_len": 512, "precision": "fp32"}) / 1e9 + 1.0

    assert per_device_gb(best) <= 40 < per_device_gb(above)
    assert f"{best} fits ({per_device_gb(best):.1f} GB)" in fits


def test_a_sharded_strategy_is_named_where_no_micro_batch_fits_and_nothing_where_none_does(tmp_path: Path) -> None:
    reasons = _reasons(tmp_path, "  - name: g\n    workload: gpt2\n    sites: [polaris]\n    walltime: 600\n"
                                 "    grid: {model: [gpt3-2.7b, mpt-30b], devices: [1, 4], batch_size: 1, "
                                 "seq_len: 256, precision: bf16}\n")
    by = {(key.split("/")[1], "mpt-30b" if "mpt-30b" in key else "2.7b"): r for key, r in reasons.items()}
    # DDP keeps 16 bytes a parameter on every device: 2.7B parameters are 43 GB of the 40.
    assert by[("4", "2.7b")].split("; ")[1].startswith("strategy fsdp-full on 4 devices fits ("), by
    assert by[("1", "2.7b")].split("; ")[1].startswith("strategy fsdp-full on 4 devices (a whole node) fits ("), by
    for devices in ("1", "4"):  # 30B parameters sharded over a node are still 120 GB a device
        assert by[(devices, "mpt-30b")].endswith("; nothing smaller fits (no smaller micro-batch nor a sharded "
                                                 "strategy)"), by


def test_the_search_asks_a_few_predictions_and_its_answer_fits() -> None:
    from orchestrator.plan.expand import RunSpec
    from orchestrator.plan.resolve import FIT_EVALUATIONS, _FitSearch, _smaller_batch
    from orchestrator.sites.profiles import load_site
    from workloads import registry

    site = load_site("polaris")  # 40 GB devices, 1 GB fixed
    spec = RunSpec(sweep="s", experiment="e", workload="bert", site="polaris", system=None, devices=1,
                   precision="fp32", strategy=None, batch_size=1000, seq_len=128, repeat=0, params=(),
                   walltime_s=600)
    for name, model in (("affine", lambda b: 3.0 + 0.5 * b), ("convex", lambda b: 3.0 + 0.01 * b * b)):
        asked: list[int] = []

        def predict(candidate: RunSpec, model=model, asked=asked) -> float:
            asked.append(int(candidate.batch_size or 0))
            return float(model(candidate.batch_size or 0))

        search = _FitSearch(predict, site, 1)
        found = _smaller_batch(spec, registry.get("bert"), model(1000), search)
        assert found is not None and len(asked) <= FIT_EVALUATIONS, (name, asked)
        best = int(found.split()[1])
        assert model(best) + 1.0 <= 40, (name, found)
        if name == "affine":  # the guess from batch 1 is exact, and the batch above it settles it
            assert found == f"batch_size 72 fits ({model(72) + 1:.1f} GB), 73 does not" and len(asked) == 3, asked
