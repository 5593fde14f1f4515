"""Which device a rank runs on, and the few device operations the harness needs.

Covered: cpu, cuda (NVIDIA, and AMD through ROCm/HIP which PyTorch also calls
cuda), xpu (Intel GPUs) and hpu (Habana Gaudi, only when its plug-in is
installed). Vendor plug-ins are imported only when asked for or probed by
``auto``, so a CPU run never pays for them.
"""

from __future__ import annotations

import importlib.util
import platform
import resource
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from workloads.harness.errors import Refused


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "cpu model", "processor\t: ")) and ":" in line:
                    value = line.split(":", 1)[1].strip()
                    if value and not value.isdigit():
                        return value
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _hpu_available() -> bool:
    if importlib.util.find_spec("habana_frameworks") is None:
        return False
    try:
        import habana_frameworks.torch.core  # noqa: F401  (registers the hpu device)

        return bool(torch.hpu.is_available())  # type: ignore[attr-defined]
    except Exception:
        return False


def _xpu_available() -> bool:
    return bool(getattr(torch, "xpu", None) is not None and torch.xpu.is_available())


def available(device_type: str) -> bool:
    if device_type == "cpu":
        return True
    if device_type == "cuda":
        return torch.cuda.is_available()
    if device_type == "xpu":
        return _xpu_available()
    if device_type == "hpu":
        return _hpu_available()
    return False


def auto_type() -> str:
    for candidate in ("cuda", "xpu", "hpu"):
        if available(candidate):
            return candidate
    return "cpu"


@dataclass
class Device:
    """One rank's device."""

    type: str  # cpu | cuda | xpu | hpu
    torch_device: torch.device
    model: str
    local_count: int  # devices of this type visible to the process
    is_rocm: bool = False

    @property
    def module(self) -> Any:  # torch.cuda / torch.xpu / torch.hpu
        return getattr(torch, self.type)

    def synchronize(self) -> None:
        if self.type == "cpu":
            return  # CPU ops are synchronous
        self.module.synchronize()

    def mark_step(self) -> None:
        """Gaudi lazy mode executes the accumulated graph here; elsewhere a no-op."""
        if self.type == "hpu":
            import habana_frameworks.torch.core as htcore

            htcore.mark_step()

    def has_timing_events(self) -> bool:
        # Device events time the stream itself, without a host sync per step.
        return self.type in ("cuda", "xpu")

    def reset_peak_memory(self) -> None:
        if self.type in ("cuda", "xpu"):
            self.module.reset_peak_memory_stats(self.torch_device)
        elif self.type == "hpu":
            try:
                torch.hpu.reset_peak_memory_stats()  # type: ignore[attr-defined]
            except Exception:
                pass
        # CPU: the process's maximum RSS cannot be reset; it covers the whole run.

    def peak_reserved_bytes(self) -> int | None:
        """Peak memory the caching allocator held from the device (allocated + its cache); None
        where there is no such allocator (cpu, hpu). What the device must really have free."""
        if self.type in ("cuda", "xpu"):
            return int(self.module.max_memory_reserved(self.torch_device))
        return None

    def peak_memory_bytes(self) -> int:
        """Peak memory of this rank: allocator peak on devices, max RSS of the process on CPU."""
        if self.type in ("cuda", "xpu"):
            return int(self.module.max_memory_allocated(self.torch_device))
        if self.type == "hpu":
            try:
                return int(torch.hpu.max_memory_allocated())  # type: ignore[attr-defined]
            except Exception:
                return 0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # Linux reports KiB, macOS bytes.
        return int(rss if sys.platform == "darwin" else rss * 1024)


def _model_name(device_type: str, index: int) -> str:
    if device_type == "cuda":
        return torch.cuda.get_device_name(index)
    if device_type == "xpu":
        return torch.xpu.get_device_name(index)
    if device_type == "hpu":
        try:
            return str(torch.hpu.get_device_name())  # type: ignore[attr-defined]
        except Exception:
            return "Habana Gaudi"
    return cpu_model()


def select(requested: str, local_rank: int = 0) -> Device:
    """The device for this rank: ``local_rank`` modulo the visible devices of the type."""
    device_type = auto_type() if requested == "auto" else requested
    if not available(device_type):
        raise Refused(f"device {device_type!r} is not available in this PyTorch ({torch.__version__})")
    if device_type == "cpu":
        return Device("cpu", torch.device("cpu"), cpu_model(), 1)
    if device_type == "hpu":
        count = int(torch.hpu.device_count())  # type: ignore[attr-defined]
        # The Habana runtime maps one process to one card itself.
        return Device("hpu", torch.device("hpu"), _model_name("hpu", 0), count)
    module = getattr(torch, device_type)
    count = int(module.device_count())
    index = local_rank % count
    module.set_device(index)
    is_rocm = device_type == "cuda" and torch.version.hip is not None
    return Device(device_type, torch.device(device_type, index), _model_name(device_type, index), count, is_rocm)
