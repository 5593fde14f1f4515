"""conv2d, relu, lstm and the transformer block at tiny sizes on CPU, one process."""

from __future__ import annotations

import math

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
    assert math.isclose(m["tflops"], 3 * forward / m["step_time_p50_s"] / 1e12, rel_tol=1e-9)
    assert m["forward_time_p50_s"] > 0 and m["backward_time_p50_s"] > 0
    assert len(doc["timing"]["forward_times_s"]) == 3
    assert doc["params"]["backward"] is True and doc["params"]["shape"] == "deepbench-0"


def test_relu_bandwidth(run_workload) -> None:
    doc = run_workload("workloads.relu", ["--width", "16", "--height", "16", "--channels", "8", "--batch-size", "4",
                                          "--precision", "bf16", *QUICK])
    m = doc["metrics"]
    elements = 16 * 16 * 8 * 4
    assert m["flops_per_step"] == elements
    assert math.isclose(m["bandwidth_gbs"], 2 * elements * 2 / m["forward_time_p50_s"] / 1e9, rel_tol=1e-9)


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
    assert math.isclose(m["tokens_per_s"], 64 / m["step_time_p50_s"], rel_tol=1e-9)
    assert math.isclose(m["tflops_forward"], fwd / m["forward_time_p50_s"] / 1e12, rel_tol=1e-9)
    assert math.isclose(m["mfu"], m["tflops"] / 0.5, rel_tol=1e-9)
    steps = doc["timing"]["step_times_s"]
    sums = [f + b for f, b in zip(doc["timing"]["forward_times_s"], doc["timing"]["backward_times_s"])]
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(steps, sums))
