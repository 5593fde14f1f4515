"""The per-step series a training workload keeps (workloads/harness/series.py): bounded in size."""

from __future__ import annotations

import math

import pytest

from workloads.harness.series import MAX_POINTS, StepSeries, stride


@pytest.mark.parametrize("total", [0, 1, 999, 1000, 1001, 2500, 1_000_000])
def test_a_series_keeps_at_most_max_points(total: int) -> None:
    series = StepSeries(total)
    for step in range(1, total + 1):
        series.offer(step, float(step))
    read = series.read(float)
    assert len(read["steps"]) <= MAX_POINTS and read["every"] == stride(total)
    assert read["steps"] == [s for s in range(1, total + 1) if s % read["every"] == 0][:MAX_POINTS]
    if total >= 1:
        assert len(read["steps"]) >= min(total, MAX_POINTS) // 2  # bounded, not thinned to nothing


def test_more_steps_than_planned_stay_bounded_and_diverged_values_are_left_out() -> None:
    series = StepSeries(10, max_points=5)
    for step in range(1, 101):
        series.offer(step, math.nan if step == 4 else float(step))
    read = series.read(float)
    assert read["every"] == 2 and read["steps"] == [2, 6, 8, 10]  # 5 kept, step 4's NaN dropped
    assert read["values"] == [2.0, 6.0, 8.0, 10.0]
