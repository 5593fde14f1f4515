"""Energy per result (workloads/harness/energy.py): counters read at the ends of the timed region,
power readings integrated, none where nothing is readable, and a real workload's metrics file.

This VM exposes no RAPL counter (no /sys/class/powercap) and no GPU: the counter path is driven
through files laid out as the kernel lays out powercap (``ORCH_RAPL_ROOT``), written while a real
workload runs; the ``none`` path is this machine's own.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from orchestrator.results.metrics_schema import MetricsFile
from tests.workloads.workload_helpers import load_valid, run_module
from workloads.harness import energy


def powercap(root: Path, packages: dict[int, int], max_range: int = 2**32) -> Path:
    """Package zones ``intel-rapl:N`` with ``energy_uj``, and a sub-zone that must not be added."""
    for index, microjoules in packages.items():
        zone = root / f"intel-rapl:{index}"
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "energy_uj").write_text(f"{microjoules}\n")
        (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
        sub = root / f"intel-rapl:{index}:0"  # the core sub-zone: already in the package's count
        sub.mkdir(exist_ok=True)
        (sub / "energy_uj").write_text("999999999\n")
    return root


def set_counter(root: Path, index: int, microjoules: int) -> None:
    target = root / f"intel-rapl:{index}" / "energy_uj"
    tmp = target.with_suffix(".tmp")
    tmp.write_text(f"{microjoules}\n")
    os.replace(tmp, target)  # a reader never sees half a number


class Clock:
    """A clock the test moves by hand, so metered seconds are exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rapl_sums_packages_not_subzones_and_unrolls_a_wrap(tmp_path: Path) -> None:
    root = powercap(tmp_path, {0: 1_000_000, 1: 2_000_000}, max_range=10_000_000)
    reader = energy.RaplReader(root)
    assert [z.name for z in reader.zones] == ["intel-rapl:0", "intel-rapl:1"]
    assert reader.read() == pytest.approx(3.0)
    set_counter(root, 0, 9_000_000)
    assert reader.read() == pytest.approx(11.0)
    set_counter(root, 0, 500_000)  # wrapped at 10 J: 10 + 0.5
    assert reader.read() == pytest.approx(12.5)


def test_meter_counts_only_between_resume_and_pause(tmp_path: Path) -> None:
    root = powercap(tmp_path, {0: 5_000_000})
    clock = Clock()
    meter = energy.Meter(energy.RaplReader(root), clock=clock)
    set_counter(root, 0, 6_000_000)  # before the timed region: not counted
    meter.resume()
    set_counter(root, 0, 10_000_000)
    clock.now += 2.0
    meter.pause()
    set_counter(root, 0, 50_000_000)  # between regions (a barrier, the next warm-up): not counted
    clock.now += 7.0
    meter.resume()
    set_counter(root, 0, 53_000_000)
    clock.now += 1.0
    reading = meter.reading()
    assert (reading.source, reading.samples, reading.error) == ("rapl", 4, None)
    assert (reading.joules, reading.seconds) == (pytest.approx(7.0), pytest.approx(3.0))
    metrics, block = energy.figures([reading], timed_steps=6, timed_time_s=2.4, tokens_per_s=1000.0)
    assert metrics["energy_j"] == pytest.approx(7.0)
    assert metrics["avg_power_w"] == pytest.approx(7.0 / 3.0)
    assert metrics["energy_per_step_j"] == pytest.approx(7.0 / 3.0 * 2.4 / 6)
    assert metrics["tokens_per_j"] == pytest.approx(1000.0 / (7.0 / 3.0))
    assert block == {"source": "rapl", "metered_s": pytest.approx(3.0), "sources_by_rank": ["rapl"]}


class ConstantPower:
    """A power reading (watts now) of a fixed value: the sampled-power path without a GPU."""

    source = "test-power"
    kind = "power"

    def __init__(self, watts: float) -> None:
        self.watts = watts

    def read(self) -> float:
        return self.watts


@pytest.mark.measures  # a 10 ms sampler thread: a loaded machine delays its samples
def test_sampled_power_is_integrated_over_the_region() -> None:
    meter = energy.Meter(ConstantPower(250.0), interval_s=0.01)
    meter.resume()
    time.sleep(0.3)
    meter.pause()
    reading = meter.reading()
    assert reading.source == "test-power" and reading.samples >= 5
    assert reading.joules == pytest.approx(250.0 * reading.seconds, rel=0.1)
    assert not any(t.name == "orch-power" for t in threading.enumerate()), "the sampler thread must end"


def test_trapezoids() -> None:
    assert energy.integrate([(0.0, 100.0), (1.0, 200.0), (3.0, 200.0)]) == pytest.approx(550.0)
    assert energy.integrate([(0.0, 100.0)]) == 0.0


class Failing:
    source = "nvml"
    kind = "energy"

    def __init__(self) -> None:
        self.calls = 0

    def read(self) -> float:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("GPU is lost")
        return 1.0


def test_a_failed_read_gives_none_with_the_error_never_a_figure() -> None:
    meter = energy.Meter(Failing())
    meter.resume()
    reading = meter.reading()
    assert reading.joules is None and reading.error == "RuntimeError: GPU is lost"
    metrics, block = energy.figures([reading], 5, 1.0, None)
    assert set(metrics.values()) == {None}
    assert block["source"] == "none" and block["errors"] == ["RuntimeError: GPU is lost"]


class SteppingNvml:
    """NVML's total-energy counter as the lent H200 showed it: it moves in steps (mJ)."""

    def __init__(self) -> None:
        self.millijoules = 5_000_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        return self.millijoules


def test_an_nvidia_window_too_short_for_its_counter_gives_none_with_why() -> None:
    """On the H200 the counter read 0 J over a 0.076 s timed region: that is no figure of 0 W."""
    nvml, clock = SteppingNvml(), Clock()
    meter = energy.Meter(energy.NvmlEnergyReader(nvml, handle=None), clock=clock)
    meter.resume()
    clock.now += 0.076  # the counter has not stepped
    short = meter.reading()
    assert short.joules is None and short.seconds == pytest.approx(0.076)
    assert short.error and "0.076 s" in short.error and "0.5 s" in short.error
    metrics, block = energy.figures([short], 20, 0.076, None)
    assert set(metrics.values()) == {None} and block["source"] == "none" and block["errors"] == [short.error]

    meter = energy.Meter(energy.NvmlEnergyReader(nvml, handle=None), clock=clock)
    meter.resume()
    clock.now += 0.6
    nvml.millijoules += 420_000
    long = meter.reading()
    assert long.error is None and long.joules == pytest.approx(420.0) and long.source == "nvml"
    # A CPU's package counter moves every millisecond: a short window still counts there.
    assert energy.RaplReader.min_window_s == 0.0


def test_ranks_combine_shared_counts_once_and_a_missing_rank_voids_the_total() -> None:
    rank0 = energy.Reading("rapl", 30.0, 2.0, 2)
    rank1 = energy.Reading("shared", None, 2.0, 0)  # same node: inside rank 0's package counter
    assert energy.combine([rank0, rank1]) == ("rapl", 30.0, 2.0)
    gpus = [energy.Reading("nvml", 400.0, 1.0, 2), energy.Reading("nvml", 410.0, 1.0, 2)]
    assert energy.combine(gpus) == ("nvml", 810.0, 1.0)
    assert energy.combine([*gpus, energy.Reading("none", None, 1.0, 0)]) == ("none", None, 1.0)


def test_no_counter_here_means_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCH_RAPL_ROOT", str(tmp_path / "no-powercap"))
    meter = energy.for_device("cpu", 0, 0)
    assert meter.reader is None
    monkeypatch.setenv("ORCH_RAPL_ROOT", str(powercap(tmp_path / "pc", {0: 1})))
    assert isinstance(energy.for_device("cpu", 0, 0).reader, energy.RaplReader)
    assert energy.for_device("cpu", 0, 1).reading().source == "shared"  # rank 0 reads the node
    monkeypatch.setenv("ORCH_ENERGY", "off")
    assert energy.for_device("cpu", 0, 0).reading().source == "none"


@pytest.mark.measures  # a counter climbs in real time beside the run: others' load would skew the power
def test_a_workload_reports_the_energy_of_its_timed_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real GEMM run while the counter file climbs at 40 W: the metrics file says rapl, about 40 W,
    and joules per step consistent with its own step times; the file passes the orchestrator's schema."""
    root = powercap(tmp_path / "powercap", {0: 0})
    stop = threading.Event()
    began = time.monotonic()

    def climb() -> None:
        while not stop.wait(0.005):
            set_counter(root, 0, int(40e6 * (time.monotonic() - began)))

    writer = threading.Thread(target=climb, daemon=True)
    writer.start()
    monkeypatch.setenv("ORCH_RAPL_ROOT", str(root))
    out = tmp_path / "m.json"
    try:
        run_module("workloads.gemm", ["--size-m", "256", "--size-n", "256", "--size-k", "256", "--warmup", "1",
                                      "--iters", "5", "--min-time", "0.5", "--output", str(out)])
    finally:
        stop.set()
        writer.join()
    doc = load_valid(out)
    MetricsFile.model_validate(doc)
    figures = doc["metrics"]
    assert doc["energy"]["source"] == "rapl" and doc["energy"]["metered_s"] >= doc["metrics"]["timed_time_s"] > 0.3
    assert figures["avg_power_w"] == pytest.approx(40.0, rel=0.25)
    assert figures["energy_j"] == pytest.approx(figures["avg_power_w"] * doc["energy"]["metered_s"])
    steps = doc["timing"]["timed_steps"]
    assert figures["energy_per_step_j"] == pytest.approx(figures["avg_power_w"] * figures["timed_time_s"] / steps)
    assert figures["tokens_per_j"] is None  # a GEMM has no tokens


def test_without_a_counter_the_file_says_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_RAPL_ROOT", str(tmp_path / "absent"))
    out = tmp_path / "m.json"
    run_module("workloads.gemm", ["--size-m", "16", "--size-n", "16", "--size-k", "16", "--warmup", "1",
                                  "--iters", "2", "--output", str(out)])
    doc = load_valid(out)
    assert doc["energy"]["source"] == "none" and doc["energy"]["sources_by_rank"] == ["none"]
    assert {doc["metrics"][k] for k in ("energy_j", "avg_power_w", "energy_per_step_j", "tokens_per_j")} == {None}
