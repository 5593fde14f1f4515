from __future__ import annotations

import math


def test_allreduce_two_ranks(run_workload) -> None:
    doc = run_workload("workloads.allreduce", ["--sizes", "1k,16384", "--warmup", "1", "--iters", "3"], nproc=2)
    m = doc["metrics"]
    rows = doc["timing"]["sizes"]
    assert [r["elements"] for r in rows] == [1024, 16384]
    assert doc["world_size"] == 2 and m["bus_factor"] == 1.0
    top = rows[-1]
    assert math.isclose(top["algbw_gbs"], 16384 * 4 / top["time_s"] / 1e9, rel_tol=1e-9)
    assert math.isclose(m["bandwidth_gbs"], top["algbw_gbs"] * 2 * (2 - 1) / 2, rel_tol=1e-9)
    assert m["busbw_gbs_1024"] > 0 and m["link_utilization"] is None


def test_allreduce_single_rank(run_workload) -> None:
    doc = run_workload("workloads.allreduce", ["--sizes", "256", "--warmup", "0", "--iters", "2",
                                               "--peak-link-gbs", "10"])
    assert doc["metrics"]["busbw_gbs"] == 0 and doc["metrics"]["algbw_gbs"] > 0
    # nccl-tests' time: the rank's summed timed time over the iterations (one rank: no average).
    steps = doc["timing"]["step_times_s"]
    assert math.isclose(doc["metrics"]["time_s_256"], math.fsum(steps) / 2, rel_tol=1e-12)
    assert math.isclose(doc["metrics"]["algbw_gbs"], 256 * 4 / doc["metrics"]["time_s_256"] / 1e9, rel_tol=1e-12)
