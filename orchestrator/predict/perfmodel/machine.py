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
    # A fixed cost per optimizer step (optimizer and scheduler launch, data loader, logging,
    # Python between steps) that no op of the model carries: without it small-batch steps came
    # out up to 12x too fast (issue 25). Estimate; ``orch calibrate`` and the published
    # validation (benchmarks/validate_published.py) fit it.
    step_overhead_ms: float = 20.0


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

# Matmul efficiency per device model and precision (issue 25: one figure per device type was
# too coarse; tuned layouts measured 44-63% MFU). Keyed by a prefix of the profile's device
# model and the precision the GEMMs run at. Sources: the fit half of the published
# measurements (benchmarks/published/figures.yaml, fitted by benchmarks/validate_published.py
# with 0.55 as prior; the held-out half checks them): Megatron-LM SC21 / Korthikanti 2022 on
# Selene (A100), LLM Foundry on H100 and A100, Megatron-LM 2019/2020 on DGX-2H (V100); tuned
# layouts, so small or badly shaped GEMMs reach less (the per-op roofline does not see tiles). fp32
# without TF32 runs on the CUDA cores: PyTorch leaves torch.backends.cuda.matmul.allow_tf32
# False since 1.12 (pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices;
# cuDNN convolutions do use TF32 by default, torch.backends.cudnn.allow_tf32 = True), so its
# peak is the fp32 one; a large fp32 SGEMM reaches ~80% of it (estimate). The workloads set
# both flags from the run's precision (workloads/harness/precision.py): "tf32" is TF32.
MATMUL_EFFICIENCY: dict[tuple[str, str], float] = {
    ("A100", "16bit"): 0.68,  # fit half: 0.677 (Megatron SC21/Korthikanti/2020 README, LLM Foundry, torchtitan)
    ("H100", "16bit"): 0.51,  # fit half: 0.513 (LLM Foundry)
    ("H200", "16bit"): 0.51,  # no H200 measurement: the H100's (same GH100 die and clocks, more HBM)
    ("V100", "16bit"): 0.52,  # fit half: 0.520 (Megatron 2019 blog, v1.0 blog, 2020 README)
    # fp8 (Transformer Engine): the fraction of the fp8 peak the layers' GEMMs reach, the rest of the
    # step in bf16 (transformer._step_time). Fit half: 0.613 (NeMo 24.07 and Megatron-Bridge 25.11 on
    # DGX H100, Llama 2/3); the H200 takes the H100's, as for 16-bit.
    ("H100", "fp8"): 0.61,
    ("H200", "fp8"): 0.61,
    ("A100", "fp32"): 0.8,
    ("H100", "fp32"): 0.8,
    ("V100", "fp32"): 0.8,
}


def matmul_efficiency(device_model: str, precision: str) -> float | None:
    """The table's matmul efficiency for this device model and precision, None where it has none."""
    kind = "16bit" if precision in ("fp16", "bf16") else precision
    for (prefix, prec), value in MATMUL_EFFICIENCY.items():
        if prec == kind and device_model.upper().startswith(prefix):
            return value
    return None

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
    # The node's whole compute-NIC bandwidth (NICs x GB/s each); None: inter_node_gbs x per_node.
    node_nic_gbs: float | None = None

    def peak(self, precision: str) -> float:
        """TFLOP/s per device at ``precision`` (tf32 falls back to fp32, 16-bit to each other)."""
        for key in (precision, {"tf32": "fp32", "bf16": "fp16", "fp16": "bf16"}.get(precision, ""), "fp32"):
            if key in self.peak_tflops:
                return self.peak_tflops[key]
        raise ValueError(f"{self.device_model} has no peak for {precision}")

    def link_gbs(self, span: int, ranks: int = 2) -> float:
        """Bandwidth of a collective over ``ranks`` ranks spread evenly over ``span`` consecutive devices.

        Inside a fast domain: the NVLink-class link. Across nodes, hierarchical as NCCL runs it
        (issue 25): rings and trees cross each node once per channel, one channel per NIC, so a
        group with all of a node's devices moves its data with the node's whole NIC bandwidth
        (capped by the fast link that feeds the NICs); groups with k of a node's devices run
        side by side with per_node/k others of their kind and get k/per_node of the NICs.
        A point-to-point send (ranks 2, one rank per node) gets one device's share.
        """
        if span <= self.fast_domain:
            return self.fast_gbs
        node = self.node_nic_gbs if self.node_nic_gbs is not None else self.inter_node_gbs * self.per_node
        stride = max(1, span // max(ranks, 1))
        local = max(1, min(ranks, self.per_node // stride))
        return min(self.fast_gbs, node * local / self.per_node)

    def for_precision(self, precision: str) -> "Machine":
        """This machine with the per-model, per-precision matmul efficiency of
        :data:`MATMUL_EFFICIENCY` where its factors are the documented per-type defaults (fitted,
        calibrated or given factors are kept as they are)."""
        if self.efficiency not in (*DEFAULT_EFFICIENCY.values(), FALLBACK_EFFICIENCY):
            return self
        value = matmul_efficiency(self.device_model, precision)
        return self if value is None else replace(self, efficiency=replace(self.efficiency, matmul=value))

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
    node_nic: float | None = None
    if net is None:
        fast_domain, fast, inter, latency = (device.per_node, DEFAULT_FAST_GBS.get(device.type, 50.0),
                                             DEFAULT_INTER_NODE_GBS, 10.0)
        notes.append("network: estimate by device type (no network section in the profile)")
    else:
        fast_domain, fast, inter, latency = net.fast_domain, net.fast_gbs, net.inter_node_gbs, net.latency_us
        if net.nics is not None and net.nic_gbs is not None:
            node_nic = net.nics * net.nic_gbs
    name = f"{site.name}:{site.system}" if site.system else site.name
    return Machine(name=name, device_type=device.type, device_model=device.model, per_node=device.per_node,
                   peak_tflops=peaks, bandwidth_gbs=bandwidth, memory_gb=device.memory_gb,
                   fixed_memory_gb=device.fixed_memory_gb or 0.0, fast_domain=fast_domain, fast_gbs=fast,
                   inter_node_gbs=inter, latency_us=latency,
                   efficiency=efficiency or DEFAULT_EFFICIENCY.get(device.type, FALLBACK_EFFICIENCY),
                   notes=tuple(notes), node_nic_gbs=node_nic)
