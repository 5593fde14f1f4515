from __future__ import annotations

import math

from tests.workloads.workload_helpers import median_rate, run_module, total_rate


def test_gemm_single_process_metrics_validate(run_workload) -> None:
    doc = run_workload("workloads.gemm", ["--m", "64", "--n", "48", "--k", "32", "--precision", "bf16",
                                          "--warmup", "1", "--iters", "4", "--peak-tflops", "1.5"])
    m = doc["metrics"]
    assert doc["workload"] == "gemm" and doc["world_size"] == 1 and doc["device"]["type"] == "cpu"
    assert doc["params"]["m"] == 64 and doc["params"]["precision"] == "bf16"
    assert len(doc["timing"]["step_times_s"]) == doc["timing"]["timed_steps"] == 4
    assert m["flops_per_step"] == 2 * 64 * 48 * 32
    # tflops: FLOPs of the timed steps over their summed time; tflops_median at the median step;
    # MFU divides tflops by the given peak.
    steps = doc["timing"]["step_times_s"]
    assert math.isclose(m["tflops"], total_rate(2 * 64 * 48 * 32, steps) / 1e12, rel_tol=1e-12)
    assert math.isclose(m["tflops_median"], median_rate(2 * 64 * 48 * 32, steps) / 1e12, rel_tol=1e-12)
    assert math.isclose(m["timed_time_s"], math.fsum(steps), rel_tol=1e-12)
    assert math.isclose(m["mfu"], m["tflops"] / 1.5, rel_tol=1e-9)
    assert m["peak_mem_gb"] > 0
    assert doc["env"]["torch"] and doc["env"]["hostnames"]


def test_gemm_two_ranks_sum_tflops(run_workload) -> None:
    doc = run_workload("workloads.gemm", ["--size-m", "64", "--size-n", "64", "--size-k", "64",
                                          "--warmup", "1", "--iters", "3"], nproc=2)
    m = doc["metrics"]
    assert doc["world_size"] == 2 and doc["device"]["count"] == 2
    assert doc["env"]["launcher"] == "torchrun" and doc["env"]["backend"] == "gloo"
    assert math.isclose(m["tflops_per_device"] * 2, m["tflops"], rel_tol=1e-9)
    assert m["mfu"] is None  # no --peak-tflops given


def test_fp8_refused_on_cpu_with_exit_2() -> None:
    proc = run_module("workloads.gemm", ["--m", "16", "--n", "16", "--k", "16", "--precision", "fp8",
                                         "--device", "cpu"], check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "fp8" in lines[0] and "Traceback" not in proc.stderr


def test_gemm_help() -> None:
    proc = run_module("workloads.gemm", ["--help"])
    assert "--size-m" in proc.stdout and "--precision" in proc.stdout and "2*M*N*K" in proc.stdout


def test_min_time_times_more_steps_until_they_last_that_long(run_workload) -> None:
    # A 32^3 product takes microseconds: 3 timed steps last far less than 0.3 s, so --min-time
    # adds steps, every one of them timed and counted in tflops.
    doc = run_workload("workloads.gemm", ["--size-m", "32", "--size-n", "32", "--size-k", "32", "--warmup", "1",
                                          "--iters", "3", "--min-time", "0.3"], nproc=2)
    steps = doc["timing"]["step_times_s"]
    assert doc["timing"]["timed_steps"] == len(steps) > 3
    # Extended (re-estimated each round) to at least 0.3 s, unless the cap on timed steps
    # binds first (a 32^3 product can take 3 us: 0.3 s would be 100,000 steps); 0.15 leaves slack.
    from workloads.harness.timing import MAX_TIMED_STEPS
    assert math.fsum(steps) >= 0.15 or len(steps) == MAX_TIMED_STEPS
    m = doc["metrics"]
    assert math.isclose(m["timed_time_s"], math.fsum(steps), rel_tol=1e-12)


def test_min_time_out_of_range_is_refused() -> None:
    proc = run_module("workloads.gemm", ["--m", "8", "--n", "8", "--k", "8", "--min-time", "-1"], check=False)
    assert proc.returncode == 2 and "--min-time" in proc.stderr and "Traceback" not in proc.stderr
