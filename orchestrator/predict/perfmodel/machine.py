"""The machine the time model sees: one device type in a two-tier network, from a site profile."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.sites.profiles import SiteProfile


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the datasheet figures a training step achieves, and a launch cost per op.

    ``matmul``: of peak FLOP/s in matrix products; ``memory``: of peak memory bandwidth in
    element-wise ops; ``network``: of the link bandwidth in collectives; ``op_overhead_us``:
    fixed cost per op (kernel launch, framework dispatch) that dominates tiny models.
    """

    matmul: float = 0.55
    memory: float = 0.7
    network: float = 0.7
    op_overhead_us: float = 10.0
    source: str = "default"


# Documented defaults (perf-model.md "achieved efficiency"): llm.c reaches ~50-60% MFU for GPT-2
# on A100/H100, a large bf16 GEMM ~80% of an H100's peak; element-wise kernels reach ~70-80% of
# HBM bandwidth; NCCL rings ~70-80% of the link. Other accelerators: lower, as their software
# stacks reach less of their datasheets in the studies. CPU: of the nominal per-process peak below.
DEFAULT_EFFICIENCY: dict[str, Efficiency] = {
    "cuda": Efficiency(0.55, 0.75, 0.7, 8.0, "default (cuda): perf-model.md, llm.c ~50-60% MFU"),
    "xpu": Efficiency(0.45, 0.7, 0.6, 15.0, "default (xpu): estimate"),
    "hpu": Efficiency(0.5, 0.7, 0.6, 15.0, "default (hpu): estimate"),
    "cpu": Efficiency(0.5, 0.5, 0.5, 20.0, "default (cpu): estimate"),
}
FALLBACK_EFFICIENCY = Efficiency(0.4, 0.6, 0.5, 20.0, "default (other devices): estimate")

# A CPU "device" is one process on one core: an AVX2/AVX-512 core at ~3 GHz does ~32 fp32
# FLOPs a cycle (two FMA units), ~0.1 TFLOP/s, and streams ~10 GB/s. Nominal, not measured:
# ``orch calibrate`` fits the fraction of it a run reaches. Used only where the site gives none.
CPU_NOMINAL_TFLOPS = 0.1
CPU_NOMINAL_GBS = 10.0
# Network figures for a site without a ``network`` section, by device type (estimates).
DEFAULT_FAST_GBS = {"cuda": 100.0, "xpu": 50.0, "hpu": 100.0, "cpu": 5.0}
DEFAULT_INTER_NODE_GBS = 12.5


@dataclass(frozen=True)
class Machine:
    """What the time model needs of a site: per-device figures and the two-tier network."""

    name: str
    device_type: str
    device_model: str
    per_node: int
    peak_tflops: dict[str, float]
    bandwidth_gbs: float
    memory_gb: float | None
    fixed_memory_gb: float
    fast_domain: int
    fast_gbs: float
    inter_node_gbs: float
    latency_us: float
    efficiency: Efficiency = field(default_factory=Efficiency)
    notes: tuple[str, ...] = ()  # which figures are estimates (shown by orch predict)

    def peak(self, precision: str) -> float:
        """TFLOP/s per device at ``precision`` (tf32 falls back to fp32, 16-bit to each other)."""
        for key in (precision, {"tf32": "fp32", "bf16": "fp16", "fp16": "bf16"}.get(precision, ""), "fp32"):
            if key in self.peak_tflops:
                return self.peak_tflops[key]
        raise ValueError(f"{self.device_model} has no peak for {precision}")

    def link_gbs(self, span: int) -> float:
        """Bandwidth per device of a group whose ranks span ``span`` consecutive devices."""
        return self.fast_gbs if span <= self.fast_domain else self.inter_node_gbs

    def with_efficiency(self, efficiency: Efficiency) -> "Machine":
        return replace(self, efficiency=efficiency)


def machine_from_site(site: "SiteProfile", efficiency: Efficiency | None = None) -> Machine:
    """The site's device and network; a figure the profile lacks is estimated and noted."""
    device, notes = site.device, []
    peaks = dict(device.peak_tflops)
    if not peaks:
        if device.type != "cpu":
            raise ValueError(f"site {site.name}: {device.model} has no peak_tflops; the time model needs one")
        peaks = {p: CPU_NOMINAL_TFLOPS for p in ("fp32", "bf16", "fp16", "tf32")}
        notes.append(f"peak: nominal {CPU_NOMINAL_TFLOPS} TFLOP/s per CPU process (no peak_tflops in the profile)")
    bandwidth = device.bandwidth_gbs
    if bandwidth is None:
        bandwidth = CPU_NOMINAL_GBS if device.type == "cpu" else 1000.0
        notes.append(f"memory bandwidth: estimate {bandwidth:g} GB/s (no bandwidth_gbs in the profile)")
    net = site.network
    if net is None:
        fast_domain, fast, inter, latency = (device.per_node, DEFAULT_FAST_GBS.get(device.type, 50.0),
                                             DEFAULT_INTER_NODE_GBS, 10.0)
        notes.append("network: estimate by device type (no network section in the profile)")
    else:
        fast_domain, fast, inter, latency = net.fast_domain, net.fast_gbs, net.inter_node_gbs, net.latency_us
    name = f"{site.name}:{site.system}" if site.system else site.name
    return Machine(name=name, device_type=device.type, device_model=device.model, per_node=device.per_node,
                   peak_tflops=peaks, bandwidth_gbs=bandwidth, memory_gb=device.memory_gb,
                   fixed_memory_gb=device.fixed_memory_gb or 0.0, fast_domain=fast_domain, fast_gbs=fast,
                   inter_node_gbs=inter, latency_us=latency,
                   efficiency=efficiency or DEFAULT_EFFICIENCY.get(device.type, FALLBACK_EFFICIENCY),
                   notes=tuple(notes))
