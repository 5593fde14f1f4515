"""conv2d, relu, lstm and the transformer block at tiny sizes on CPU, one process."""

from __future__ import annotations

import math

from tests.workloads.workload_helpers import median_rate, total_rate
from workloads import flops

QUICK = ["--warmup", "1", "--iters", "3"]


def test_conv2d_forward_and_backward(run_workload) -> None:
    doc = run_workload("workloads.conv2d", ["--width", "8", "--height", "8", "--channels", "4", "--filters", "8",
                                            "--batch-size", "2", "--pad-w", "1", "--pad-h", "1",
                                            "--backward", "true", *QUICK])
    m = doc["metrics"]
    forward = flops.conv2d(8, 8, 4, 2, 8, 3, 3, 1, 1)
    assert m["flops_forward"] == forward and m["flops_backward"] == 2 * forward
    assert m["flops_per_step"] == 3 * forward
    steps = doc["timing"]["step_times_s"]
    assert math.isclose(m["tflops"], total_rate(3 * forward, steps) / 1e12, rel_tol=1e-12)
    assert math.isclose(m["tflops_median"], median_rate(3 * forward, steps) / 1e12, rel_tol=1e-12)
    fwd = doc["timing"]["forward_times_s"]
    assert math.isclose(m["tflops_forward"], total_rate(forward, fwd) / 1e12, rel_tol=1e-12)
    assert math.isclose(m["tflops_backward"], total_rate(2 * forward, doc["timing"]["backward_times_s"]) / 1e12,
                        rel_tol=1e-12)
    assert m["forward_time_p50_s"] > 0 and m["backward_time_p50_s"] > 0
    assert len(doc["timing"]["forward_times_s"]) == 3
    assert doc["params"]["backward"] is True and doc["params"]["shape"] == "deepbench-0"


def test_relu_bandwidth(run_workload) -> None:
    doc = run_workload("workloads.relu", ["--width", "16", "--height", "16", "--channels", "8", "--batch-size", "4",
                                          "--precision", "bf16", *QUICK])
    m = doc["metrics"]
    elements = 16 * 16 * 8 * 4
    assert m["flops_per_step"] == elements
    fwd = doc["timing"]["forward_times_s"]
    assert math.isclose(m["bandwidth_gbs"], total_rate(2 * elements * 2, fwd) / 1e9, rel_tol=1e-12)
    assert math.isclose(m["bandwidth_gbs_median"], 2 * elements * 2 / m["forward_time_p50_s"] / 1e9, rel_tol=1e-9)


def test_lstm_study_and_full_rates(run_workload) -> None:
    doc = run_workload("workloads.lstm", ["--seq-len", "4", "--batch-size", "2", "--input-size", "8",
                                          "--hidden-size", "16", "--backward", "true", *QUICK])
    m = doc["metrics"]
    assert m["flops_forward"] == flops.lstm(4, 2, 8, 16)
    ratio = flops.lstm_full(4, 2, 8, 16) / flops.lstm(4, 2, 8, 16)
    assert math.isclose(m["tflops_full"], m["tflops"] * ratio, rel_tol=1e-9)


def test_transformer_block(run_workload) -> None:
    doc = run_workload("workloads.transformer_block", ["--hidden", "64", "--heads", "4", "--seq-len", "32",
                                                       "--batch-size", "2", "--precision", "bf16",
                                                       "--peak-tflops", "0.5", *QUICK])
    m = doc["metrics"]
    fwd = flops.transformer_block_forward(2, 32, 64)
    assert m["flops_forward"] == fwd and m["flops_backward"] == 2 * fwd
    steps, fwd_times = doc["timing"]["step_times_s"], doc["timing"]["forward_times_s"]
    assert math.isclose(m["tokens_per_s"], total_rate(64, steps), rel_tol=1e-12)
    assert math.isclose(m["tokens_per_s_median"], 64 / m["step_time_p50_s"], rel_tol=1e-9)
    assert math.isclose(m["tflops"], total_rate(3 * fwd, steps) / 1e12, rel_tol=1e-12)
    assert math.isclose(m["tflops_forward"], total_rate(fwd, fwd_times) / 1e12, rel_tol=1e-12)
    assert math.isclose(m["tflops_forward_median"], fwd / m["forward_time_p50_s"] / 1e12, rel_tol=1e-9)
    assert math.isclose(m["forward_tokens_per_s"], total_rate(64, fwd_times), rel_tol=1e-12)
    assert math.isclose(m["mfu"], m["tflops"] / 0.5, rel_tol=1e-9)
    steps = doc["timing"]["step_times_s"]
    sums = [f + b for f, b in zip(doc["timing"]["forward_times_s"], doc["timing"]["backward_times_s"])]
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(steps, sums))
