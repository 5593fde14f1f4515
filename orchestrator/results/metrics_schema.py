"""The metrics file every workload writes (schema ``orch.metrics/1``) and its validation.

The workloads write it without importing this module (they must not import
``orchestrator``); the tests check their files against :class:`MetricsFile`.

Validation is strict (pydantic's strict mode): a number must be a JSON number, never
``true`` (which lax mode reads as 1.0) or a string such as ``"1e3"``; integers stand for
floats, and every integer is bounded to what a database column holds (64-bit signed).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA = "orch.metrics/1"

# The headline figures the ``results`` view shows as columns. Every one is optional:
# a GEMM has no tokens, a training run has no single-kernel TFLOP/s spread.
HEADLINE_METRICS: tuple[str, ...] = (
    "tokens_per_s",
    "samples_per_s",
    "tflops",
    "tflops_per_device",
    "mfu",
    "peak_mem_gb",
    "step_time_s",
    "step_time_p50_s",
    "step_time_p90_s",
    "step_time_std_s",
    "epoch_time_s",
    "bandwidth_gbs",
    # Migration 0005: the median-based rates beside the total-based ones, what the run held.
    "tokens_per_s_median",
    "samples_per_s_median",
    "tflops_median",
    "timed_time_s",
    "global_batch",
    "cores",
    "threads",
)


# The magnitudes a metric may have: what every view can compute on every backend (issue 53).
# PostgreSQL's AVG over doubles keeps a running sum of squared deviations, and repeat_spread
# averages squares (a value to the fourth power): past ~1e77 that overflows, and PostgreSQL
# raises an error where SQLite gives Infinity. At 1e60 a fourth power is 1e240, and summed over
# even 1e18 rows it stays below the end of doubles (~1.8e308). PostgreSQL also raises on a
# product that underflows to zero (a square of 1e-200): a non-zero value is at least 1e-60, so
# a view's product of two stays above 1e-308. No measurement comes near either bound: FLOP
# counts of the largest training runs are about 1e25, a step time of a picosecond is 1e-12.
MAX_METRIC_MAGNITUDE = 1e60
MIN_METRIC_MAGNITUDE = 1e-60

# The largest integer SQLite and PostgreSQL (bigint) columns hold.
INT64_MAX = 2**63 - 1
Count = Annotated[int, Field(le=INT64_MAX)]
# Counts the views cast to INTEGER (32-bit on PostgreSQL: db/views/inference_0013.sql's
# concurrency, token lengths and TTFT samples from timing.timed_steps).
INT32_MAX = 2**31 - 1
ViewCount = Annotated[int, Field(le=INT32_MAX)]
VIEW_COUNT_METRICS = ("concurrency", "input_len", "output_len")


def magnitude_problem(number: float) -> str | None:
    """Why a metric value is outside what every view computes, or None."""
    if isinstance(number, bool) or not math.isfinite(number):
        return "expected a finite number"
    if abs(number) > MAX_METRIC_MAGNITUDE:
        return f"beyond {MAX_METRIC_MAGNITUDE:g}: its powers would overflow the statistics over repeats"
    if number and abs(number) < MIN_METRIC_MAGNITUDE:
        return f"non-zero but below {MIN_METRIC_MAGNITUDE:g}: its products would underflow the views' arithmetic"
    return None


def nul_path(value: Any, path: str = "") -> str | None:
    """Where a NUL character is, in a key or a string of a parsed JSON document, or None:
    PostgreSQL's JSON functions refuse to unescape one (\\u0000), so a view that reads the
    stored document would fail for every row."""
    if isinstance(value, str):
        return path or "(top level)" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return where.replace("\x00", "\\0")
            found = nul_path(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = nul_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


class Timing(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    warmup_steps: ViewCount = Field(ge=0)
    timed_steps: ViewCount = Field(ge=1)
    # Per-step seconds of the timed steps (rank 0, or the max over ranks).
    step_times_s: list[float] = Field(default_factory=list)


class DeviceInfo(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: str
    model: str
    count: Count = Field(ge=1)


# The most points one series may hold (workloads keep at most 1,000: workloads/harness/series.py).
MAX_SERIES_POINTS = 20_000
# Series names are stored in metric_series.name (String(100)), as metric names are.
SeriesName = Annotated[str, Field(min_length=1, max_length=100)]


class StepSeries(BaseModel):
    """One per-step series (e.g. the training loss): ``values[i]`` at optimiser step ``steps[i]``,
    every ``every``-th step kept (``series`` of the file; ingest stores it in ``metric_series``)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    every: Count = Field(ge=1)
    steps: list[Count] = Field(max_length=MAX_SERIES_POINTS)
    values: list[float] = Field(max_length=MAX_SERIES_POINTS)

    @field_validator("steps")
    @classmethod
    def _increasing(cls, value: list[int]) -> list[int]:
        if any(step < 0 for step in value):
            raise ValueError("a step number is negative")
        if any(b <= a for a, b in zip(value, value[1:])):
            raise ValueError("step numbers must increase")
        return value

    @field_validator("values")
    @classmethod
    def _finite(cls, value: list[float]) -> list[float]:
        for number in value:
            problem = magnitude_problem(number)
            if problem:
                raise ValueError(f"value {number!r}: {problem}")
        return value

    def model_post_init(self, __context: Any) -> None:
        if len(self.steps) != len(self.values):
            raise ValueError(f"{len(self.steps)} steps but {len(self.values)} values")


class MetricsFile(BaseModel):
    """One run's measurements. Extra keys are kept (stored in the raw JSON)."""

    model_config = ConfigDict(extra="allow", strict=True)

    schema_: Literal["orch.metrics/1"] = Field(alias="schema")
    workload: str
    status: Literal["ok"] = "ok"
    params: dict[str, Any] = Field(default_factory=dict)
    precision: str
    world_size: Count = Field(ge=1)
    device: DeviceInfo
    metrics: dict[str, float | None]
    timing: Timing
    env: dict[str, Any] = Field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None
    # Per-step series by name (training workloads: ``loss``); absent in older files.
    series: dict[SeriesName, StepSeries] = Field(default_factory=dict)

    @field_validator("metrics")
    @classmethod
    def _finite_and_sane(cls, value: dict[str, float | None]) -> dict[str, float | None]:
        for name, number in value.items():
            if number is None:
                continue
            problem = magnitude_problem(number)
            if problem:
                raise ValueError(f"metric {name!r} is {number!r}, {problem}")
            if name in VIEW_COUNT_METRICS and number > INT32_MAX:
                raise ValueError(f"metric {name!r} is {number!r}, beyond {INT32_MAX}: the views hold it as a "
                                 "32-bit integer")
            if number < 0:
                raise ValueError(f"metric {name!r} is negative ({number})")
        return value

    def headline(self) -> dict[str, float | None]:
        return {name: self.metrics.get(name) for name in HEADLINE_METRICS}
