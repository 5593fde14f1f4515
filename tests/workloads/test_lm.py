"""GPT-2 and GenSLM training: strategies, data sources, epochs, refusals."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from tests.workloads.workload_helpers import median_rate, run_module, total_rate
from workloads import flops
from workloads.models.configs import SIZES, num_params

TINY = ["--model", "tiny", "--batch-size", "2", "--seq-len", "32", "--warmup", "1", "--iters", "2"]


def _check_throughput(doc: dict, ranks: int, accum: int = 1) -> None:
    m = doc["metrics"]
    n = num_params(SIZES["tiny"])
    tokens_per_step = 2 * 32 * accum * ranks
    assert m["model_params"] == n and m["tokens_per_step"] == tokens_per_step
    steps = doc["timing"]["step_times_s"]  # each the slowest rank's
    assert math.isclose(m["tokens_per_s"], total_rate(tokens_per_step, steps), rel_tol=1e-12)
    assert math.isclose(m["tokens_per_s_median"], median_rate(tokens_per_step, steps), rel_tol=1e-12)
    assert m["global_batch"] == 2 * accum * ranks
    assert math.isclose(m["samples_per_s"], total_rate(m["global_batch"], steps), rel_tol=1e-12)
    per_token = flops.gpt_train_flops_per_token(n, 2, 64, 32)
    assert m["flops_per_token"] == per_token
    assert math.isclose(m["tflops"], per_token * m["tokens_per_s"] / 1e12, rel_tol=1e-9)
    assert math.isclose(m["tflops_per_device"] * ranks, m["tflops"], rel_tol=1e-9)
    assert 0 < m["loss"] < 20 and m["peak_mem_gb"] > 0


def test_gpt2_single_process_with_accumulation(run_workload) -> None:
    doc = run_workload("workloads.gpt2", [*TINY, "--grad-accum", "2", "--precision", "bf16",
                                          "--peak-tflops", "1.0"])
    _check_throughput(doc, 1, accum=2)
    assert math.isclose(doc["metrics"]["mfu"], doc["metrics"]["tflops"] / 1.0, rel_tol=1e-9)


def test_gpt2_text_by_epochs(run_workload) -> None:
    doc = run_workload("workloads.gpt2", [*TINY, "--data", "text", "--epochs", "2", "--max-steps-per-epoch", "3",
                                          "--warmup", "1"])
    m, t = doc["metrics"], doc["timing"]
    assert m["steps_per_epoch"] == 3 and t["timed_epoch"] == 2 and len(t["epoch_times_s"]) == 2
    assert m["epoch_time_s"] == pytest.approx(t["epoch_times_s"][1])
    assert t["timed_steps"] == 5 and t["warmup_steps"] == 1  # 2 epochs x 3 steps, first left out


def test_gpt2_streams_a_file(run_workload, tmp_path: Path) -> None:
    data = tmp_path / "tokens.bin"
    import numpy as np

    np.arange(5000, dtype=np.uint16).tofile(data)  # nanoGPT's format: uint16 token ids
    doc = run_workload("workloads.gpt2", [*TINY, "--data", f"file:{data}", "--epochs", "1",
                                          "--max-steps-per-epoch", "2", "--warmup", "0"])
    assert doc["metrics"]["epoch_time_s"] > 0 and doc["params"]["data"] == f"file:{data}"


def test_fsdp_grad_op_single_process(run_workload) -> None:
    doc = run_workload("workloads.gpt2", [*TINY, "--strategy", "fsdp-grad-op", "--precision", "fp16"])
    _check_throughput(doc, 1)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp-full"])
def test_gpt2_two_ranks(run_workload, strategy: str) -> None:
    doc = run_workload("workloads.gpt2", [*TINY, "--strategy", strategy, "--grad-accum", "2"], nproc=2)
    assert doc["world_size"] == 2 and doc["params"]["strategy"] == strategy
    assert doc["env"]["backend"] == "gloo" and len(doc["env"]["hostnames_by_rank"]) == 2
    _check_throughput(doc, 2, accum=2)


def test_genslm(run_workload) -> None:
    doc = run_workload("workloads.genslm", ["--model", "tiny", "--batch-size", "2", "--seq-len", "48",
                                            "--num-sequences", "8", "--epochs", "2", "--warmup", "0"])
    m = doc["metrics"]
    assert m["steps_per_epoch"] == 4 and m["tokens_per_step"] == 96
    # vocabulary 70: N = 70*64 + 2 layers + final LayerNorm
    assert m["model_params"] == num_params(SIZES["tiny"].with_(vocab_size=70))


def _deepspeed_unusable() -> str | None:
    try:
        import deepspeed  # noqa: F401
    except Exception as exc:  # the only reason these tests may be skipped
        return f"DeepSpeed is not importable here ({type(exc).__name__}: {exc})"
    return None


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_zero_two_ranks(run_workload, stage: int) -> None:
    reason = _deepspeed_unusable()
    if reason:
        pytest.skip(reason)
    doc = run_workload("workloads.gpt2", [*TINY, "--strategy", f"zero{stage}", "--grad-accum", "2",
                                          "--precision", "bf16"], nproc=2, timeout=300)
    assert doc["env"]["deepspeed"]
    _check_throughput(doc, 2, accum=2)


def test_deepspeed_missing_is_a_clear_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A module named deepspeed that fails to import, ahead of any installed one.
    (tmp_path / "deepspeed.py").write_text("raise ImportError('No module named deepspeed (test stub)')\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = run_module("workloads.gpt2", [*TINY, "--strategy", "zero1"], check=False)
    assert proc.returncode == 2, proc.stderr
    assert "needs DeepSpeed" in proc.stderr and "Traceback" not in proc.stderr


def test_fp8_training_refused() -> None:
    proc = run_module("workloads.gpt2", [*TINY, "--precision", "fp8"], check=False)
    assert proc.returncode == 2 and "fp8" in proc.stderr  # not offered: argparse refuses it


def test_deepspeed_fp16_on_cpu_follows_the_cpu() -> None:
    """DeepSpeed's CPU accelerator offers fp16 only where oneDNN has fp16 kernels (AVX512-FP16/AMX
    Xeons, not e.g. AMD EPYC): there the run completes in fp16, elsewhere it is refused (exit 2)
    with the reason, never run at another precision."""
    reason = _deepspeed_unusable()
    if reason:
        pytest.skip(reason)
    from deepspeed.accelerator import get_accelerator

    proc = run_module("workloads.gpt2", [*TINY, "--strategy", "zero1", "--precision", "fp16"], check=False)
    if get_accelerator().is_fp16_supported():
        assert proc.returncode == 0, proc.stderr
        assert "fp16" in proc.stdout and "tokens_per_s=" in proc.stdout
    else:
        assert proc.returncode == 2 and "fp16" in proc.stderr.splitlines()[-1]


def test_gpt2_writes_its_loss_per_step(run_workload) -> None:
    """series.loss: every optimiser step's loss (warm-up included), the last one the metrics' loss;
    no compile_s without --compile."""
    doc = run_workload("workloads.gpt2", [*TINY, "--grad-accum", "2"])
    loss = doc["series"]["loss"]
    assert loss["every"] == 1 and loss["steps"] == [1, 2, 3]  # 1 warm-up + 2 timed
    assert len(loss["values"]) == 3 and all(0 < v < 20 for v in loss["values"])
    assert loss["values"][-1] == pytest.approx(doc["metrics"]["loss"], rel=1e-6)
    assert "compile_s" not in doc["metrics"]


def test_gpt2_loss_series_by_epochs(run_workload) -> None:
    doc = run_workload("workloads.gpt2", [*TINY, "--data", "text", "--epochs", "2", "--max-steps-per-epoch", "3"])
    assert doc["series"]["loss"]["steps"] == [1, 2, 3, 4, 5, 6]


def test_gpt2_compile_step_is_timed_apart(run_workload) -> None:
    """--compile: the first step (tracing and compiling) is compile_s, outside the timed steps; with
    --warmup 0 it is still run untimed (nothing compiles inside the timed region)."""
    doc = run_workload("workloads.gpt2", [*TINY, "--warmup", "0", "--compile", "true"], timeout=600)
    timing = doc["timing"]
    assert timing["warmup_steps"] == 1 and timing["timed_steps"] == 2 and len(timing["step_times_s"]) == 2
    assert doc["metrics"]["compile_s"] > 0
    assert doc["series"]["loss"]["steps"] == [1, 2, 3]
    # Compiled and eager agree (issue 50): the same seed, data and steps give the same losses, to
    # the tolerance of inductor's reordered float sums.
    eager = run_workload("workloads.gpt2", [*TINY, "--warmup", "1", "--compile", "false"], timeout=600)
    assert eager["series"]["loss"]["steps"] == [1, 2, 3]
    assert doc["series"]["loss"]["values"] == pytest.approx(eager["series"]["loss"]["values"], rel=1e-4, abs=1e-5)
