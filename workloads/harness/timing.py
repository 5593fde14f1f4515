"""Timed steps: warm-up excluded, device synchronised, one duration per step.

On cuda/xpu the steps are timed with device events recorded on the stream (one
event per step boundary, read after one final synchronise), so timing adds no
host-device round trip per step; elsewhere each step ends with a synchronise and
is timed with ``time.perf_counter``.

Rates (one definition for every workload, ``db/glossary_metrics.yaml``): a figure
such as tokens/s is the work of the timed steps over their total time,
``work_per_step * steps / sum(step_times)``, as the studies define throughput
(total tokens over total time); the rate at the median step,
``work_per_step / median(step_times)``, is kept beside it under ``<name>_median``.
The step times are the slowest rank's per step (warm-up excluded), so their sum,
``timed_time_s``, is the wall time the timed steps took.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from workloads.harness.device import Device

if TYPE_CHECKING:
    from workloads.harness.energy import Meter


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(step_times: list[float]) -> dict[str, float]:
    """p50 (also as ``step_time_s``), p90, mean, min, max and sample std of the step times,
    and their sum ``timed_time_s`` (the denominator of every total-based rate)."""
    p50 = percentile(step_times, 50)
    return {
        "timed_time_s": math.fsum(step_times),
        "step_time_s": p50,
        "step_time_p50_s": p50,
        "step_time_p90_s": percentile(step_times, 90),
        "step_time_mean_s": statistics.fmean(step_times),
        "step_time_min_s": min(step_times),
        "step_time_max_s": max(step_times),
        "step_time_std_s": statistics.stdev(step_times) if len(step_times) > 1 else 0.0,
    }


@dataclass(frozen=True)
class Rate:
    """Work per second over the timed steps, two ways.

    ``total``: work of all timed steps / their summed time (the headline figure);
    ``median``: work of one step / the median step time (kept as ``<name>_median``).
    """

    total: float
    median: float


def rate(work_per_step: float, step_times: Sequence[float]) -> Rate:
    """The rate of ``work_per_step`` (tokens, samples, FLOPs, bytes ...) over ``step_times``.

    NaN for no steps or a zero time (the metrics file stores those as null).
    """
    total_time = math.fsum(step_times)
    p50 = percentile(list(step_times), 50)
    return Rate(
        total=work_per_step * len(step_times) / total_time if total_time > 0 else math.nan,
        median=work_per_step / p50 if p50 > 0 else math.nan,
    )


def rate_figures(name: str, work_per_step: float, step_times: Sequence[float]) -> dict[str, float]:
    """``{name: total-based rate, name + "_median": median-based rate}``."""
    r = rate(work_per_step, step_times)
    return {name: r.total, f"{name}_median": r.median}


def sum_figures(per_rank: Iterable[dict[str, float]]) -> dict[str, float]:
    """Figure by figure, the sum over ranks (of rates each rank measured on its own device)."""
    total: dict[str, float] = {}
    for figures in per_rank:
        for name, value in figures.items():
            total[name] = total.get(name, 0.0) + value
    return total


class StepClock:
    """Per-step durations for a loop the workload writes itself.

    ``start(laps)`` before the first timed step, ``lap()`` after each, ``times()`` at the end.
    ``meter`` (the session's energy meter) runs from ``start()`` to ``times()``.

    On a device with timing events each lap records one on the stream. The events are made in
    ``start`` (``laps`` + 1 of them, where the loop knows its length), before the timed region:
    made in the loop, an event cost the host more than a short kernel takes, so the device waited
    on the host and the steps read long. A 1024^3 bf16 GEMM on the H200 read 20 us a step so
    against 10 us in a bare loop (benchmarks/bench_harness_overhead.py, 2026-11-28).
    ``time_steps`` and the inference decoder tell; gpt2's loop (workloads/lm.py) does not: its
    steps take milliseconds, against the microseconds an event costs to make.
    """

    def __init__(self, device: Device, meter: Meter | None = None) -> None:
        self.device = device
        self.meter = meter
        self._events = device.has_timing_events()
        self._marks: list[Any] = []
        self._spare: list[Any] = []
        self._stream: Any = None

    def _event(self) -> Any:
        event = self.device.module.Event(enable_timing=True)
        if self._stream is not None:
            event.record(self._stream)  # the device's event is made on first record: here, untimed
        return event

    def _mark(self) -> Any:
        if self._events:
            event = self._spare.pop() if self._spare else self._event()
            event.record(self._stream)
            return event
        self.device.synchronize()
        return time.perf_counter()

    def start(self, laps: int = 0) -> None:
        self.device.mark_step()
        if self._events:
            self._stream = self.device.module.current_stream()
            self._spare = [self._event() for _ in range(max(laps, 0) + 1)]
        self.device.synchronize()
        if self.meter is not None:
            self.meter.resume()
        self._marks = [self._mark()]

    def lap(self) -> None:
        self.device.mark_step()
        self._marks.append(self._mark())

    def times(self) -> list[float]:
        if self._events and self._marks:
            self._marks[-1].synchronize()  # the device has finished the timed steps
        if self.meter is not None:
            self.meter.pause()
        self._spare = []
        if len(self._marks) < 2:
            return []
        if self._events:
            return [a.elapsed_time(b) / 1000.0 for a, b in zip(self._marks, self._marks[1:])]
        return [b - a for a, b in zip(self._marks, self._marks[1:])]


# The most timed steps a run's --min-time may add up to: every step's time goes into the
# metrics file (ingest refuses files over 16 MiB; 20,000 times are about 0.5 MB).
MAX_TIMED_STEPS = 20_000


def extra_steps(done: int, timed_s: float, min_time_s: float) -> int:
    """Steps to add to ``done`` timed steps that took ``timed_s`` so they last ``min_time_s``."""
    if done <= 0 or timed_s >= min_time_s:
        return 0
    wanted = math.ceil(done * min_time_s / max(timed_s, 1e-9)) - done
    return max(0, min(wanted, MAX_TIMED_STEPS - done))


def time_steps(device: Device, step: Callable[[], Any], warmup: int, iters: int,
               meter: Meter | None = None) -> list[float]:
    """Run ``step`` warmup times untimed, then iters times timed; seconds per timed step.
    ``meter`` (energy) runs over the timed steps alone."""
    for _ in range(warmup):
        step()
    device.mark_step()
    device.synchronize()
    if device.type == "cpu":
        if meter is not None:
            meter.resume()
        # CPU work is synchronous: one timestamp per step is all the timing there is (the
        # harness-overhead benchmark holds this loop to within 2% of a bare one).
        now = time.perf_counter
        marks = [now()]
        append = marks.append
        for _ in range(iters):
            step()
            append(now())
        if meter is not None:
            meter.pause()
        return [b - a for a, b in zip(marks, marks[1:])]
    clock = StepClock(device, meter)
    clock.start(iters)
    for _ in range(iters):
        step()
        clock.lap()
    return clock.times()


class IntervalClock:
    """Durations of chosen regions (e.g. forward and backward separately).

    ``begin(name)`` / ``end(name)`` around each region; ``times(name)`` after the
    loop. With device events nothing waits until ``times``; otherwise each mark
    synchronises the device first so a region ends when its kernels do.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        self._events = device.has_timing_events()
        self._open: dict[str, Any] = {}
        self._pairs: dict[str, list[tuple[Any, Any]]] = {}

    def _mark(self) -> Any:
        self.device.mark_step()
        if self._events:
            event = self.device.module.Event(enable_timing=True)
            event.record()
            return event
        self.device.synchronize()
        return time.perf_counter()

    def begin(self, name: str) -> None:
        self._open[name] = self._mark()

    def end(self, name: str) -> None:
        self._pairs.setdefault(name, []).append((self._open.pop(name), self._mark()))

    def times(self, name: str) -> list[float]:
        pairs = self._pairs.get(name, [])
        if self._events:
            if pairs:
                pairs[-1][1].synchronize()
            return [a.elapsed_time(b) / 1000.0 for a, b in pairs]
        return [b - a for a, b in pairs]


def first_step_time(device: Device, step: Callable[[], Any]) -> float:
    """Wall seconds of one step run apart from the others, from an idle device to an idle device
    (``torch.compile``'s first step: tracing, compiling and one execution; ``compile_s``)."""
    device.mark_step()
    device.synchronize()
    began = time.perf_counter()
    step()
    device.mark_step()
    device.synchronize()
    return time.perf_counter() - began
