"""One definition of throughput (issue 10): total work over total timed time, the median-based
figure beside it, and study C's conv2d FLOP count under its own name."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from tests.workloads.workload_helpers import median_rate, total_rate
from workloads import flops, shapes
from workloads.harness import timing
from workloads.harness.device import Device
from workloads.models.configs import SIZES, num_params

# --- the arithmetic (workloads/harness/timing.py) ---------------------------------------------


def test_rate_is_total_work_over_total_time_and_median_beside_it() -> None:
    # One slow step of three: the total-based rate sees it, the median-based one does not.
    r = timing.rate(600.0, [1.0, 1.0, 4.0])
    assert r.total == pytest.approx(600.0 * 3 / 6.0) and r.median == pytest.approx(600.0)
    assert timing.rate_figures("tokens_per_s", 600.0, [1.0, 1.0, 4.0]) == {
        "tokens_per_s": r.total, "tokens_per_s_median": r.median}


def test_rate_of_no_time_is_nan_not_an_error() -> None:
    assert math.isnan(timing.rate(1.0, []).total) and math.isnan(timing.rate(1.0, [0.0]).median)


def test_summarize_has_the_timed_time() -> None:
    figures = timing.summarize([0.5, 0.25, 2.0])
    assert figures["timed_time_s"] == 2.75 and figures["step_time_mean_s"] == pytest.approx(2.75 / 3)


def test_rates_summed_over_ranks_figure_by_figure() -> None:
    assert timing.sum_figures([{"tflops": 1.0, "tflops_median": 2.0}, {"tflops": 0.5, "tflops_median": 1.0}]) \
        == {"tflops": 1.5, "tflops_median": 3.0}


# --- a tiny gpt2: tokens/s = total tokens / total timed time ------------------------------------


def test_gpt2_tokens_per_s_is_total_tokens_over_total_timed_time(run_workload) -> None:
    b, s, accum = 2, 32, 2
    doc = run_workload("workloads.gpt2", ["--model", "tiny", "--batch-size", str(b), "--seq-len", str(s),
                                          "--grad-accum", str(accum), "--warmup", "1", "--iters", "4",
                                          "--peak-tflops", "2.0"])
    m, steps = doc["metrics"], doc["timing"]["step_times_s"]
    assert len(steps) == doc["timing"]["timed_steps"] == 4
    tokens_per_step = b * s * accum  # one rank
    assert m["timed_time_s"] == pytest.approx(math.fsum(steps), rel=1e-12)
    assert m["tokens_per_s"] == pytest.approx(tokens_per_step * len(steps) / math.fsum(steps), rel=1e-12)
    assert m["tokens_per_s_median"] == pytest.approx(tokens_per_step / statistics.median(steps), rel=1e-12)
    assert m["global_batch"] == b * accum
    assert m["samples_per_s"] == pytest.approx(b * accum * len(steps) / math.fsum(steps), rel=1e-12)
    assert m["samples_per_s_median"] == pytest.approx(b * accum / statistics.median(steps), rel=1e-12)
    per_token = flops.gpt_train_flops_per_token(num_params(SIZES["tiny"]), SIZES["tiny"].n_layer,
                                                SIZES["tiny"].n_embd, s)
    assert m["flops_per_token"] == per_token
    assert m["tflops"] == pytest.approx(per_token * m["tokens_per_s"] / 1e12, rel=1e-12)
    assert m["tflops_median"] == pytest.approx(per_token * m["tokens_per_s_median"] / 1e12, rel=1e-12)
    assert m["tflops_per_device"] == pytest.approx(m["tflops"], rel=1e-12)
    assert m["mfu"] == pytest.approx(m["tflops"] / 2.0, rel=1e-12)


# --- conv2d: study C's count (no +1 in the output width) beside orch's -------------------------


def test_study_c_conv_count_on_every_deepbench_shape() -> None:
    for d in shapes.CONV2D.values():
        args = (d["w"], d["h"], d["c"], d["b"], d["k"], d["fw"], d["fh"], d["pw"], d["ph"])
        wo, ho = d["w"] + 2 * d["pw"] - d["fw"], d["h"] + 2 * d["ph"] - d["fh"]  # the study's, stride 1
        assert flops.conv2d_study_c(*args) == 2 * wo * ho * d["k"] * d["c"] * d["fw"] * d["fh"] * d["b"]
        assert flops.conv2d(*args) / flops.conv2d_study_c(*args) == pytest.approx((wo + 1) * (ho + 1) / (wo * ho))


def test_conv2d_reports_the_study_c_figure(run_workload) -> None:
    # DeepBench's first shape (7,7,32,b,32,3,3,0,0) at batch 2: the true output is 5x5, study C's 4x4.
    doc = run_workload("workloads.conv2d", ["--shape", "deepbench-0", "--batch-size", "2", "--backward", "true",
                                            "--warmup", "1", "--iters", "3"])
    m, steps = doc["metrics"], doc["timing"]["step_times_s"]
    study_forward = 2 * 4 * 4 * 32 * 32 * 3 * 3 * 2
    orch_forward = 2 * 5 * 5 * 32 * 32 * 3 * 3 * 2
    assert m["flops_forward_study_c"] == study_forward and m["flops_forward"] == orch_forward
    assert m["flops_per_step_study_c"] == 3 * study_forward and m["flops_per_step"] == 3 * orch_forward
    assert m["tflops"] == pytest.approx(total_rate(3 * orch_forward, steps) / 1e12, rel=1e-12)
    assert m["tflops_median"] == pytest.approx(median_rate(3 * orch_forward, steps) / 1e12, rel=1e-12)
    assert m["tflops_study_c"] == pytest.approx(total_rate(3 * study_forward, steps) / 1e12, rel=1e-12)
    assert m["tflops"] / m["tflops_study_c"] == pytest.approx(orch_forward / study_forward, rel=1e-12)
    assert m["tflops"] / m["tflops_study_c"] == pytest.approx(1.5625, rel=1e-12)  # the 1.56x
    fwd = doc["timing"]["forward_times_s"]
    assert m["tflops_forward_study_c"] == pytest.approx(total_rate(study_forward, fwd) / 1e12, rel=1e-12)
    assert (m["out_w"], m["out_h"]) == (5, 5)


def test_extra_steps_reach_the_minimum_time_within_the_cap() -> None:
    assert timing.extra_steps(100, 0.02, 1.0) == 4900  # 100 steps in 20 ms: 5,000 in 1 s
    assert timing.extra_steps(100, 1.5, 1.0) == 0  # already long enough
    assert timing.extra_steps(100, 0.0, 1.0) == timing.MAX_TIMED_STEPS - 100  # no time measured: the cap
    assert timing.extra_steps(0, 0.0, 1.0) == 0


# --- device events (StepClock): what the host does inside the timed region ---------------------
# CUDA does not run on this machine: a recording stand-in for torch.cuda's Event and stream API
# counts what the clock asks of it. The GPU figures are in benchmarks/RESULTS.md (the H200's
# harness overhead, 2026-11-28).

class _Events:
    """torch.cuda's Event and current_stream, recording each event's last record time."""

    def __init__(self) -> None:
        self.made = 0
        self.now = 0.0

    def current_stream(self) -> str:
        return "stream"

    def synchronize(self) -> None:
        pass

    def Event(self, enable_timing: bool) -> _Events._Event:  # noqa: N802  (torch's name)
        assert enable_timing
        self.made += 1
        return _Events._Event(self)

    class _Event:
        def __init__(self, owner: _Events) -> None:
            self.owner, self.at = owner, -1.0

        def record(self, stream: object = None) -> None:
            assert stream == "stream"  # on the stream the steps run on
            self.at = self.owner.now

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: _Events._Event) -> float:
            return (end.at - self.at) * 1000.0  # milliseconds, as torch's


class _EventDevice(Device):
    """A device with timing events, torch.cuda's API answered by ``events``."""

    events: _Events

    @property
    def module(self) -> _Events:
        return self.events


def _event_device() -> _EventDevice:
    device = _EventDevice("cuda", torch.device("cpu"), "stand-in", 1)
    device.events = _Events()
    return device


def test_a_clock_told_its_laps_makes_no_device_event_inside_the_timed_region() -> None:
    device = _event_device()
    clock = timing.StepClock(device)
    clock.start(laps=3)
    made_before = device.events.made
    for step_s in (0.5, 0.25, 1.0):
        device.events.now += step_s
        clock.lap()
    assert device.events.made == made_before == 4  # one for the start, one per lap, all before it
    assert clock.times() == [0.5, 0.25, 1.0]


def test_a_clock_that_runs_past_its_laps_or_was_told_none_still_times_every_step() -> None:
    for told in (0, 2):
        device = _event_device()
        clock = timing.StepClock(device)
        clock.start(laps=told)
        for step_s in (0.5, 0.25, 1.0, 2.0):
            device.events.now += step_s
            clock.lap()
        assert clock.times() == [0.5, 0.25, 1.0, 2.0]
        assert device.events.made == 5
