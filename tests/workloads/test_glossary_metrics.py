"""Every metric a workload writes is defined in db/glossary_metrics.yaml (formula, unit, studies).

Each registered workload runs once, tiny, on CPU, in the configuration that writes the most of
its metrics; a workload registered without a configuration here fails too. (Every other test
that runs a workload through the ``run_workload`` fixture checks its metrics the same way.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.workloads.workload_helpers import glossary, load_valid, run_module, undocumented
from workloads import registry

QUICK = ["--warmup", "1", "--iters", "2"]
CONFIGS: dict[str, list[str]] = {
    "gemm": ["--size-m", "32", "--size-n", "16", "--size-k", "8", "--peak-tflops", "1", *QUICK],
    "conv2d": ["--shape", "deepbench-0", "--batch-size", "1", "--backward", "true", *QUICK],
    "relu": ["--width", "8", "--height", "8", "--channels", "4", "--batch-size", "2", "--backward", "true", *QUICK],
    "lstm": ["--seq-len", "3", "--batch-size", "2", "--input-size", "8", "--hidden-size", "8", "--layers", "2",
             "--backward", "true", *QUICK],
    "transformer_block": ["--hidden", "32", "--heads", "2", "--seq-len", "16", "--batch-size", "1", *QUICK],
    "gpt2": ["--model", "tiny", "--batch-size", "2", "--seq-len", "16", "--data", "text", "--epochs", "2",
             "--max-steps-per-epoch", "2", "--sparsity", "0.5", "--warmup", "1"],
    "genslm": ["--model", "tiny", "--batch-size", "2", "--seq-len", "48", "--num-sequences", "4", "--epochs", "2",
               "--warmup", "0"],
    "allreduce": ["--sizes", "64,128", "--peak-link-gbs", "10", *QUICK],
    "probe": ["--device", "cpu", "--elements", "64", *QUICK],
    "unet": ["--size", "tiny", "--batch-size", "1", *QUICK],
    "resnet50": ["--size", "tiny", "--batch-size", "2", "--mode", "inference", *QUICK],
    "bert": ["--size", "tiny", "--batch-size", "2", "--seq-len", "16", "--max-predictions", "4", *QUICK],
    "distilbert": ["--size", "tiny", "--seq-len", "16", *QUICK],
    "braggnn": ["--size", "tiny", "--batch-size", "4", *QUICK],
    "candle_uno": ["--size", "tiny", "--batch-size", "4", *QUICK],
    "llm_inference": ["--model", "tiny", "--concurrency", "2", "--input-len", "8", "--output-len", "3",
                      "--peak-tflops", "1", "--peak-bandwidth-gbs", "10", *QUICK],
    # A real server (workloads/serving/cpu_server.py) under a short Poisson load, with an SLO.
    "llm_serving": ["--model", "tiny", "--arrival", "poisson", "--rate", "20", "--num-requests", "4",
                    "--input-len", "8", "--output-len", "3", "--warmup", "1"],
}


def test_every_registered_workload_has_a_configuration_here() -> None:
    assert not set(registry.WORKLOADS) - set(CONFIGS), "add a configuration to CONFIGS"


@pytest.mark.parametrize("name", sorted(n for n in CONFIGS if n in registry.WORKLOADS))
def test_every_metric_is_in_the_glossary(name: str, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    run_module(registry.WORKLOADS[name].module, [*CONFIGS[name], "--output", str(out)])
    written = load_valid(out)["metrics"]
    assert not undocumented(written), f"{name} writes metrics db/glossary_metrics.yaml lacks: {undocumented(written)}"


def test_glossary_entries_are_complete() -> None:
    entries = glossary()
    assert entries, "db/glossary_metrics.yaml is empty"
    for name, entry in entries.items():
        assert re.fullmatch(r"[a-z0-9_]+(<[A-Za-z]+>)?", name), name
        assert set(entry) == {"formula", "unit", "studies", "note"}, name
        assert all(isinstance(entry[k], str) and entry[k].strip() for k in ("formula", "unit", "note")), name
        assert isinstance(entry["studies"], list), name
        assert all(re.fullmatch(r"[A-E][0-9]", study) for study in entry["studies"]), name


def test_the_glossary_check_catches_an_undocumented_name() -> None:
    assert undocumented(["tflops", "busbw_gbs_16777216", "tflops_made_up"]) == ["tflops_made_up"]
