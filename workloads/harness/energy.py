"""Energy of the timed region, from a counter the device itself exposes, or none at all.

Sources, in order of preference for a rank's device:

- ``nvml``: NVIDIA's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ since the
  driver loaded; Volta and later) through ``pynvml`` (the ``nvidia-ml-py`` package). Where the
  board has no energy counter, NVML's power reading (``nvmlDeviceGetPowerUsage``, mW) sampled
  in a thread and integrated over time (``nvml-power``).
- ``nvidia-smi``: ``nvidia-smi --query-gpu=power.draw`` sampled in a thread, where ``pynvml``
  is not importable.
- ``rapl``: the Linux powercap counters of the CPU packages (``/sys/class/powercap/intel-rapl:N/
  energy_uj``, also AMD's on recent kernels), read by local rank 0 of each node only (the
  counter covers the whole package, so every rank of the node is in it; the others report
  ``shared``). It counts whatever else runs on the package too.
- ``none``: nothing readable. Every energy figure is then null: no estimate from a datasheet's
  power is ever reported as a measurement.

``ORCH_ENERGY=off`` turns metering off (source ``none``); ``ORCH_RAPL_ROOT`` names another
powercap folder (the tests point it at files they write). The meter is started and stopped by
the harness around the timed steps only (:mod:`workloads.harness.timing`), so warm-up and
set-up never count; a counter is read twice per timed region, a sampler thread wakes every
``POWER_INTERVAL_S``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

# How often a power reading (not a counter) is sampled: NVML refreshes its power figure about
# every 20-100 ms depending on the board; nvidia-smi costs tens of ms per call.
POWER_INTERVAL_S = 0.05
SMI_INTERVAL_S = 0.2
# The shortest metered window an NVIDIA source gives a figure for. NVML's counter moves in steps
# and its power figure is an average over a window of its own: on the lent H200 (2026-11-27,
# benchmarks/RESULTS.md) the counter read 0 J over a transformer block's 0.076 s of timed steps
# at 460 TFLOP/s, and 720 W over an fp8 GEMM's 0.57 s on a board capped at 700 W. A shorter
# window's figure is none, with the reason, never a number that is mostly the counter's step.
NVIDIA_MIN_WINDOW_S = 0.5

NONE = "none"
SHARED = "shared"  # a rank whose node counter another rank of the node reads


class Reader(Protocol):
    """One readable figure: cumulative joules (``kind == "energy"``) or watts now (``"power"``)."""

    source: str
    kind: str
    # A reader may also say ``min_window_s``: shorter metered windows give no figure (its resolution).

    def read(self) -> float: ...


class RaplReader:
    """The sum of the package counters under a powercap root, in joules, wrap-arounds unrolled.

    Each ``intel-rapl:N`` (not its sub-zones ``intel-rapl:N:M``, which the package already counts)
    has ``energy_uj``, wrapping at ``max_energy_range_uj``.
    """

    source = "rapl"
    kind = "energy"
    min_window_s = 0.0  # the package counters move every millisecond or so

    def __init__(self, root: str | os.PathLike[str] = "/sys/class/powercap") -> None:
        base = Path(root)
        self.zones = sorted(p for p in base.glob("intel-rapl:*") if p.name.count(":") == 1)
        if not self.zones:
            raise OSError(f"no RAPL package zones under {base}")
        self.ranges = [_int_file(z / "max_energy_range_uj", default=2**32) for z in self.zones]
        self._last = [_int_file(z / "energy_uj") for z in self.zones]  # raises when unreadable
        self._wraps = [0] * len(self.zones)

    def read(self) -> float:
        total = 0
        for i, zone in enumerate(self.zones):
            raw = _int_file(zone / "energy_uj")
            if raw < self._last[i]:  # the counter wrapped since the last read
                self._wraps[i] += 1
            self._last[i] = raw
            total += raw + self._wraps[i] * self.ranges[i]
        return total / 1e6


def _int_file(path: Path, default: int | None = None) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        if default is None:
            raise OSError(f"cannot read {path}") from None
        return default


class NvmlEnergyReader:
    source = "nvml"
    min_window_s = NVIDIA_MIN_WINDOW_S
    kind = "energy"

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml, self._handle = nvml, handle
        self.read()  # raises NVMLError_NotSupported on boards without the counter

    def read(self) -> float:
        return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)) / 1e3  # mJ -> J


class NvmlPowerReader:
    source = "nvml-power"
    min_window_s = NVIDIA_MIN_WINDOW_S
    kind = "power"

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml, self._handle = nvml, handle
        self.read()

    def read(self) -> float:
        return float(self._nvml.nvmlDeviceGetPowerUsage(self._handle)) / 1e3  # mW -> W


class SmiPowerReader:
    source = "nvidia-smi"
    min_window_s = NVIDIA_MIN_WINDOW_S
    kind = "power"

    def __init__(self, device_id: str) -> None:
        self._cmd = ["nvidia-smi", "--query-gpu=power.draw", "--format=csv,noheader,nounits", "-i", device_id]
        self.read()

    def read(self) -> float:
        out = subprocess.run(self._cmd, capture_output=True, text=True, timeout=5, check=True).stdout
        return float(out.strip().splitlines()[0])  # "[N/A]" raises ValueError: no reading


@dataclass(frozen=True)
class Reading:
    """What one rank metered: ``joules`` None when it had no source (or its source failed)."""

    source: str
    joules: float | None
    seconds: float
    samples: int
    error: str | None = None


class Meter:
    """Energy over the intervals between ``resume()`` and ``pause()``, added up.

    A counter is read at each end; a power reading is sampled in a thread and integrated
    (trapezoids, the ends included). A failed read disables the meter: its figures become
    none, with the error kept.
    """

    def __init__(self, reader: Reader | None, *, shared: bool = False, interval_s: float = POWER_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reader = reader
        self.shared = shared
        self.interval_s = interval_s
        self._clock = clock
        self._joules = 0.0
        self._seconds = 0.0
        self._samples = 0
        self._error: str | None = None
        self._began: float | None = None
        self._start_value = 0.0
        self._points: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._began is not None

    def _read(self) -> float | None:
        if self.reader is None or self._error is not None:
            return None
        try:
            return self.reader.read()
        except Exception as exc:  # any failure of the source: no figure, never a guess
            self._error = f"{type(exc).__name__}: {exc}"
            return None

    def resume(self) -> None:
        if self.running:
            return
        self._began = self._clock()  # the metered seconds count with or without a source
        if self.reader is None or self._error is not None:
            return
        if self.reader.kind == "energy":
            value = self._read()
            self._start_value = value if value is not None else 0.0
            self._samples += 1
            return
        self._points = []
        self._sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sampling, name="orch-power", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        value = self._read()
        if value is not None:
            self._points.append((self._clock(), value))

    def _sampling(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def pause(self) -> None:
        if self._began is None:
            return
        ended = self._clock()
        if self._thread is not None:  # a power reading sampled since resume(): stop, then integrate
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample()
            self._joules += integrate(self._points)
            self._samples += len(self._points)
        elif self.reader is not None and self._error is None:  # a counter: the difference
            value = self._read()
            if value is not None:
                self._joules += max(0.0, value - self._start_value)
                self._samples += 1
        self._seconds += ended - self._began
        self._began = None

    def reading(self) -> Reading:
        self.pause()
        if self.shared:
            return Reading(SHARED, None, self._seconds, 0)
        if self.reader is None:
            return Reading(NONE, None, self._seconds, 0, self._error)
        if self._error is not None or self._samples == 0:
            return Reading(self.reader.source, None, self._seconds, self._samples, self._error)
        least = getattr(self.reader, "min_window_s", 0.0)
        if self._seconds < least:
            why = (f"{self.reader.source}: the timed steps took {self._seconds:.3f} s, under the {least:g} s "
                   "this source needs for a figure (time more steps)")
            return Reading(self.reader.source, None, self._seconds, self._samples, why)
        return Reading(self.reader.source, self._joules, self._seconds, self._samples)


def integrate(points: list[tuple[float, float]]) -> float:
    """Joules from (time s, watts) samples: the trapezoid rule."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(points, points[1:]))


def combine(readings: list[Reading]) -> tuple[str, float | None, float]:
    """Every rank's reading -> (source, total joules or None, metered seconds).

    The ranks that read a counter of their own add up; ``shared`` ranks are in another
    rank's counter. If any rank that should have measured could not, the total is None
    (a part of the devices' energy is not the run's), and the source says ``none``.
    """
    owners = [r for r in readings if r.source != SHARED]
    seconds = max((r.seconds for r in readings), default=0.0)
    if not owners or any(r.joules is None for r in owners):
        return NONE, None, seconds
    return "+".join(sorted({r.source for r in owners})), sum(r.joules or 0.0 for r in owners), seconds


def figures(readings: list[Reading], timed_steps: int, timed_time_s: float | None,
            tokens_per_s: float | None) -> tuple[dict[str, float | None], dict[str, Any]]:
    """The metrics (``energy_j``, ``avg_power_w``, ``energy_per_step_j``, ``tokens_per_j``) and
    the ``energy`` block of the metrics file (source, metered seconds, per-rank sources, errors).

    Per step and per token come from the average power over the metered region and the
    workload's own step times and token rate: joules per step = watts x timed_time_s / steps,
    tokens per joule = tokens/s / watts.
    """
    source, joules, seconds = combine(readings)
    watts = joules / seconds if joules is not None and seconds > 0 else None
    per_step = watts * timed_time_s / timed_steps if watts is not None and timed_time_s and timed_steps else None
    per_token = tokens_per_s / watts if watts and tokens_per_s else None
    metrics: dict[str, float | None] = {"energy_j": joules, "avg_power_w": watts,
                                        "energy_per_step_j": per_step, "tokens_per_j": per_token}
    block: dict[str, Any] = {"source": source, "metered_s": seconds,
                             "sources_by_rank": [r.source for r in readings]}
    errors = sorted({r.error for r in readings if r.error})
    if errors:
        block["errors"] = errors
    return metrics, block


# --- choosing the source for a rank's device ---------------------------------------------

def _nvml_handle(nvml: Any, index: int) -> Any:
    """NVML's handle for torch's cuda device ``index``: by UUID (CUDA_VISIBLE_DEVICES renumbers
    devices for torch but not for NVML), by position where torch has no UUID."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        text = str(uuid)
        try:
            return nvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
        except Exception:
            pass  # an older driver's spelling: fall back to the position
    return nvml.nvmlDeviceGetHandleByIndex(index)


def _nvidia(index: int) -> Reader | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        handle = _nvml_handle(pynvml, index)
    except Exception:
        pynvml = None
    if pynvml is not None:
        for make in (NvmlEnergyReader, NvmlPowerReader):
            try:
                return make(pynvml, handle)
            except Exception:
                continue
    if shutil.which("nvidia-smi"):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        device_id = visible[index].strip() if index < len(visible) and visible[index].strip() else str(index)
        try:
            return SmiPowerReader(device_id)
        except Exception:
            return None
    return None


def for_device(device_type: str, index: int, local_rank: int, *, rocm: bool = False) -> Meter:
    """The meter of one rank (a meter without a reader reports ``none``)."""
    if os.environ.get("ORCH_ENERGY", "").strip().lower() in ("off", "0", "false", "no"):
        return Meter(None)
    if device_type == "cuda" and not rocm:
        reader = _nvidia(index)
        return Meter(reader, interval_s=SMI_INTERVAL_S if isinstance(reader, SmiPowerReader) else POWER_INTERVAL_S)
    if device_type == "cpu":
        if local_rank != 0:
            # Rank 0 of the node reads the node's packages; this rank is in its figure if it has one.
            return Meter(None, shared=_rapl() is not None)
        return Meter(_rapl())
    return Meter(None)  # ROCm SMI, Level Zero, hl-smi: not read yet (none, not a guess)


def _rapl() -> RaplReader | None:
    try:
        return RaplReader(os.environ.get("ORCH_RAPL_ROOT") or "/sys/class/powercap")
    except OSError:
        return None
