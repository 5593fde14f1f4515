"""Validate the time model against published, cited training measurements (issue 25).

    .venv/bin/python benchmarks/validate_published.py [--json] [--no-fit]

Reads benchmarks/published/figures.yaml (the measurements) and systems.yaml beside it (each
source's machine: devices per node, NVLink, the node's NICs, peaks), turns each time or
throughput entry into a published step time and a predicted one, splits the entries into a
fit half and a held-out half, fits the free factors on the fit half only, and prints per-entry
predicted vs published step and the mean/max absolute % error of each half.

Split rule (deterministic, documented): entries are grouped by (source, device), the source
being the publication the entry cites (its `url`: one paper, README revision, blog post or
results table); within a group, ordered by sha256(id), they alternate fit, held-out, fit, ...
so every source and device type with two or more entries appears in both halves.

Free factors (few, each with a prior; see FREE below): the matmul efficiency of each device
model (A100, H100, V100) and the per-step overhead; the fit minimises the mean absolute log
error on the fit half plus a log-distance-to-prior penalty, by coordinate descent.

Conversions: tokens_per_s = global_batch x seq / step; per device divides by the devices;
tflops_per_device (Megatron's hardware FLOPs, SC21 Eq. 3 / Shoeybi 2019: 96 B s L h^2 (1 + s/6h +
V/16Lh), activation recompute included) = FLOPs / step / devices. So each entry's published
value gives a published step time, and the error is on step time.

fp8 entries (Transformer Engine) are predicted with the time model's fp8 path: the layers'
GEMMs at the fp8 peak, the rest in bf16, and a matmul factor of their own per device family
(``matmul:H100:fp8``), fitted on the fit half like the others.

Exclusions (printed with the reason, never silent): memory metrics (the memory model's
business), entries whose model shape is not published, and entries whose interconnect is not
published (the model needs the node's NICs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import validation_report  # noqa: E402
from orchestrator.predict.perfmodel.layout import Layout  # noqa: E402
from orchestrator.predict.perfmodel.machine import Efficiency, Machine  # noqa: E402
from orchestrator.predict.perfmodel.transformer import ModelShape, step_seconds  # noqa: E402

HERE = Path(__file__).resolve().parent / "published"
TIME_METRICS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_device", "tflops_per_device")
# The issue's acceptance bounds on the held-out half (tests/unit/test_published_validation.py).
TARGET_MEAN, TARGET_MAX = 0.10, 0.25


@dataclasses.dataclass
class Case:
    """One usable entry: how to predict its step, and its published step."""

    id: str
    group: str
    device: str
    published_s: float
    predict: Callable[[Efficiency], float]
    layout: str
    precision: str = "bf16"


def _precision(text: str) -> str | None:
    text = text.lower()
    if "fp8" in text or "float8" in text:
        return "fp8"  # Transformer Engine's fp8 (delayed or current scaling): the layers' GEMMs only
    if "bf16" in text:
        return "bf16"
    if "16" in text:  # fp16, mixed-16bit
        return "fp16"
    return "fp32" if "fp32" in text else None


def _strategy(zero: Any, framework: str) -> str:
    """figures.yaml's `zero` as the model's data-parallel mode (DeepSpeed stages vs FSDP)."""
    if zero in (None, 0, "none"):
        return "ddp"
    text = str(zero).lower()
    if "grad_op" in text or "grad-op" in text:
        return "fsdp-grad-op"
    if "fsdp" in text or "full_shard" in text or "hsdp" in text:
        return "fsdp-full"
    if str(zero) in ("1", "2", "3"):
        return f"zero{zero}"  # DeepSpeed ZeRO (framework: DeepSpeed)
    raise ValueError(f"unknown zero {zero!r} ({framework})")


def _recompute(entry: dict[str, Any]) -> bool:
    """Full activation recompute. Where the source does not name it: the Megatron papers' tflops
    rows (SC21 Tables 1-2, the 2019 blog) count it in their FLOPs (Eq. 3, the 96 factor), so the
    runs used it; a step-time row whose own published TFLOP/s (``also``) equals that
    recompute-counting formula within 3% used it too (the Megatron-LM 2020 README rows: 149.8
    for 1076 ms, ...). 'selective' recompute (attention scores only) is not modelled."""
    value = entry["layout"].get("activation_recompute")
    if value is None:
        if entry["metric"] == "tflops_per_device":
            return entry["id"].startswith("megatron-")
        also = (entry.get("also") or {}).get("tflops_per_gpu")
        if also and entry["metric"] == "step_time_s":
            layout = entry["layout"]
            per_replica = int(layout["global_batch"]) // int(layout.get("dp") or 1)
            rate = megatron_flops(entry["model"], per_replica) / float(entry["value"]) / 1e12
            rate /= int(layout.get("tp") or 1) * int(layout.get("pp") or 1)
            return abs(rate / float(also) - 1) < 0.03
        return False
    return str(value).lower() == "full"


def _fused_attention(entry: dict[str, Any]) -> bool:
    """Whether attention ran fused (flash/SDPA: no s x s scores in memory). Megatron-LM's
    2019-2022 runs (the Megatron papers, Korthikanti et al.) and DeepSpeed's ZeRO-3 run in SC21
    predate FlashAttention (Dao et al., arXiv:2205.14135, May 2022) in those frameworks: their
    fused scale-mask-softmax kernel still writes and reads the b x a x s x s scores (Korthikanti
    et al.'s selective recompute exists to drop exactly those). LLM Foundry (flash/triton),
    torchtitan (SDPA) and the rest run fused attention."""
    return not entry["id"].startswith(("megatron-", "korthikanti-"))


def _micro_batch(entry: dict[str, Any], dp: int) -> int:
    """Published micro-batch, else (SC21 Table 1, not published per row) 1 with a pipeline
    (Megatron's large runs) and the replica's whole share without one."""
    layout = entry["layout"]
    if layout.get("micro_batch"):
        return int(layout["micro_batch"])
    return 1 if (layout.get("pp") or 1) > 1 else max(1, int(layout["global_batch"]) // dp)


def megatron_flops(model: dict[str, Any], batch: int) -> float:
    """Shoeybi 2019 / Narayanan SC21 Eq. 3: 96 B s L h^2 (1 + s/6h + V/16Lh), recompute included."""
    s, layers, h, v = model["seq"], model["layers"], model["hidden"], model["vocab"]
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))


def published_step(entry: dict[str, Any]) -> float:
    """The entry's published figure as seconds a step (global batch x seq tokens)."""
    value, devices = float(entry["value"]), int(entry["devices"])
    batch = int(entry["layout"]["global_batch"])
    tokens = batch * int(entry["model"]["seq"])
    metric = entry["metric"]
    if metric == "step_time_s":
        return value
    if metric == "tokens_per_s":
        return tokens / value
    if metric == "tokens_per_s_per_device":
        return tokens / (value * devices)
    return megatron_flops(entry["model"], batch) / (value * 1e12 * devices)  # tflops_per_device


def _machine(system: dict[str, Any], per_node: int) -> Machine:
    kwargs: dict[str, Any] = dict(
        name=system["system"], device_type="cuda", device_model="", per_node=per_node,
        peak_tflops=dict(system["peak_tflops"]), bandwidth_gbs=float(system["bandwidth_gbs"]), memory_gb=None,
        fixed_memory_gb=0.0, fast_domain=per_node, fast_gbs=float(system["fast_gbs"]),
        inter_node_gbs=system["nics"] * system["nic_gbs"] / per_node, latency_us=float(system["latency_us"]))
    if "node_nic_gbs" in {f.name for f in dataclasses.fields(Machine)}:
        kwargs["node_nic_gbs"] = system["nics"] * system["nic_gbs"]
    return Machine(**kwargs)


# Llama layers (SwiGLU MLP of width ffn, grouped-query attention with kv_heads key/value heads,
# RMSNorm, rotary positions, an output head untied from the embedding): the entries publish
# layers, hidden, heads and vocabulary only. Llama 2: workloads/models/llama_configs.py (Touvron et
# al. 2023, table 1 and the released configs). Llama 3 and 3.1 8B/70B: the published model configs
# as tabulated in oumi-ai/oumi configs/recipes/llama3_1/README.md ("MLP intermediate size 14,336 |
# Num KV heads 8 | Weight tying False" for 8B; 28,672 and 8 for 70B; Llama 3 and 3.1 share the
# shapes). A third-party table: worth a check against Meta's config.json. Llama 3.1 405B: "The Llama 3
# Herd of Models" (Dubey et al., arXiv:2407.21783), Table 3: 126 layers, model dimension 16,384,
# FFN dimension 53,248, 128 attention heads, 8 key/value heads (the same table gives 14,336 and
# 28,672 for 8B and 70B, as above).
LLAMA_LAYERS: dict[str, dict[str, int]] = {
    "llama2-7b": {"ffn": 11008, "kv_heads": 32}, "llama2-13b": {"ffn": 13824, "kv_heads": 40},
    "llama2-70b": {"ffn": 28672, "kv_heads": 8},
    "llama3-8b": {"ffn": 14336, "kv_heads": 8}, "llama3.1-8b": {"ffn": 14336, "kv_heads": 8},
    "llama3-70b": {"ffn": 28672, "kv_heads": 8}, "llama3.1-70b": {"ffn": 28672, "kv_heads": 8},
    "llama3.1-405b": {"ffn": 53248, "kv_heads": 8},
}


def shape_of(model: dict[str, Any], fused_attention: bool) -> ModelShape:
    """The entry's model: a GPT (learned positions, 4h GeLU MLP, tied head) unless it is a Llama."""
    common = dict(layers=model["layers"], hidden=model["hidden"], heads=model["heads"], vocab=model["vocab"],
                  seq_len=model["seq"], fused_attention=fused_attention)
    llama = LLAMA_LAYERS.get(str(model.get("name")))
    if llama is None:
        return ModelShape(**common, positions=model["seq"])
    if "gated" not in {f.name for f in dataclasses.fields(ModelShape)}:
        return ModelShape(**common, positions=model["seq"])  # an older model (the "before" rows): a GPT
    return ModelShape(**common, positions=0, gated=True, tied=False, **llama)  # type: ignore[arg-type]


def _family(device: str) -> str:
    return device.split("-")[0]  # A100, H100, V100


def load_cases(figures: Path = HERE / "figures.yaml",
               systems: Path = HERE / "systems.yaml") -> tuple[list[Case], list[tuple[str, str]]]:
    """(usable entries, (id, reason) of every time entry left out)."""
    entries = yaml.safe_load(figures.read_text())
    table = yaml.safe_load(systems.read_text())
    cases: list[Case] = []
    excluded: list[tuple[str, str]] = []
    for e in entries:
        if e["metric"] not in TIME_METRICS:
            continue  # memory figures: validated by the memory model, not here
        precision = _precision(str(e["precision"]))
        model, layout = e["model"], e["layout"]
        if precision is None:
            excluded.append((e["id"], f"precision {e['precision']!r}: not one the time model knows"))
            continue
        if e["device"] not in table:
            excluded.append((e["id"], f"device {e['device']!r}: its system (interconnect) is not published"))
            continue
        if not all(model.get(k) for k in ("layers", "hidden", "heads", "vocab", "seq")):
            excluded.append((e["id"], "model shape not published"))
            continue
        system = table[e["device"]]
        per_node = int(e.get("devices_per_node") or system["per_node"])
        tp, pp, cp = int(layout.get("tp") or 1), int(layout.get("pp") or 1), int(layout.get("cp") or 1)
        dp = int(layout.get("dp") or e["devices"] // (tp * pp * cp))
        global_batch = int(layout["global_batch"])
        mb = _micro_batch(e, dp)
        lay = Layout(dp=dp, tp=tp, pp=pp, cp=cp, strategy=_strategy(layout.get("zero"), e["framework"]),
                     recompute=_recompute(e))
        if lay.strategy == "ddp" and e["id"].startswith("megatron-") and "grad_overlap" in Layout.__dataclass_fields__:
            # Megatron-LM before Megatron-Core (these sources, 2019-2021) ran its own DDP
            # (`--DDP-impl local`, the default until 2023): gradients all-reduced after the backward.
            lay = dataclasses.replace(lay, grad_overlap=False)  # type: ignore[call-arg]
        if layout.get("vp") and "vp" in {f.name for f in dataclasses.fields(Layout)}:
            lay = dataclasses.replace(lay, vp=int(layout["vp"]))  # type: ignore[call-arg]
        shape = shape_of(model, _fused_attention(e))
        published = published_step(e)
        machine = _machine(system, per_node)

        def predict(eff: Efficiency, machine: Machine = machine, shape: ModelShape = shape, lay: Layout = lay,
                    precision: str = precision, mb: int = mb, gb: int = global_batch) -> float:
            return step_seconds(shape, lay, machine.with_efficiency(eff), precision=precision, batch_size=mb,
                                micro_batch=mb, global_batch=gb)

        cases.append(Case(e["id"], str(e["url"]), e["device"], published, predict,
                          f"{lay.name} mb{mb} gb{global_batch} {precision}", precision))
    return cases, excluded


def split(cases: list[Case]) -> tuple[list[Case], list[Case]]:
    """(fit, held-out): alternate within each (source url, device) group in sha256(id) order."""
    groups: dict[tuple[str, str], list[Case]] = {}
    for c in cases:
        groups.setdefault((c.group, c.device), []).append(c)
    fit_half: list[Case] = []
    held: list[Case] = []
    for key in sorted(groups):
        ordered = sorted(groups[key], key=lambda c: hashlib.sha256(c.id.encode()).hexdigest())
        for i, c in enumerate(ordered):
            (fit_half if i % 2 == 0 else held).append(c)
    return fit_half, held


# Free factors and their priors. Matmul efficiency per device family (the fraction of dense
# peak a tuned transformer layer's GEMMs reach): published tuned layouts reach 44-63% MFU
# (figures.yaml; perf-model.md: llm.c ~50-60% on A100/H100); the step overhead: a fixed cost
# per optimizer step (optimizer launch, data loader, logging, Python), a few tens of ms.
PRIOR_WEIGHT = 0.02  # penalty per unit |log(factor / prior)|: a mild pull, not a constraint


def _factor(case: Case) -> str:
    """The matmul factor of a case: one per device family, and one more for its fp8 runs (a
    fraction of the fp8 peak, which Transformer Engine's GEMMs reach less of than 16-bit ones do of theirs)."""
    return f"matmul:{_family(case.device)}" + (":fp8" if case.precision == "fp8" else "")


def _efficiency(base: Efficiency, factors: dict[str, float], case: Case) -> Efficiency:
    eff = dataclasses.replace(base, matmul=factors.get(_factor(case), base.matmul))
    if "step_overhead_ms" in factors and hasattr(eff, "step_overhead_ms"):
        eff = dataclasses.replace(eff, step_overhead_ms=factors["step_overhead_ms"])  # type: ignore[call-arg]
    return eff


def errors(cases: list[Case], base: Efficiency, factors: dict[str, float]) -> list[tuple[Case, float, float]]:
    """(case, predicted step, signed relative error) of each case."""
    out = []
    for c in cases:
        predicted = c.predict(_efficiency(base, factors, c))
        out.append((c, predicted, (predicted - c.published_s) / c.published_s))
    return out


def fit(cases: list[Case], base: Efficiency, priors: dict[str, float]) -> dict[str, float]:
    """Factors minimising mean |log(pred/pub)| + PRIOR_WEIGHT x sum |log(f/prior)|, by coordinate descent."""
    families = {_factor(c) for c in cases}
    factors = {k: v for k, v in priors.items() if k in families or not k.startswith("matmul:")}

    def loss(fs: dict[str, float]) -> float:
        data = sum(abs(math.log(p / c.published_s)) for c, p, _ in errors(cases, base, fs)) / len(cases)
        return data + PRIOR_WEIGHT * sum(abs(math.log(fs[k] / priors[k])) for k in fs)

    # a matmul efficiency above 95% of peak is no GEMM's
    return validation_report.descend(loss, factors, lambda k, v: not (k.startswith("matmul:") and v > 0.95), 1.005)


def summary(rows: list[tuple[Case, float, float]]) -> dict[str, float]:
    return validation_report.summary([e for _, _, e in rows])


def run(do_fit: bool = True) -> dict[str, Any]:
    cases, excluded = load_cases()
    fit_half, held = split(cases)
    from orchestrator.predict.perfmodel import machine as machine_module

    # getattr: the script also runs against older checkouts of the model (the "before" figures).
    matmul_efficiency = getattr(machine_module, "matmul_efficiency", lambda device, precision: None)
    DEFAULT_EFFICIENCY = machine_module.DEFAULT_EFFICIENCY

    # The documented defaults; "source" marks them as given here, so Machine.for_precision keeps them.
    base = dataclasses.replace(DEFAULT_EFFICIENCY["cuda"], source="validate_published")
    priors: dict[str, float] = {}
    for c in cases:  # prior: the per-model table; fp8 without a table entry: the 16-bit figure
        precision = "fp8" if c.precision == "fp8" else "bf16"
        priors[_factor(c)] = (matmul_efficiency(c.device, precision) or matmul_efficiency(c.device, "bf16")
                              or base.matmul)
    if hasattr(base, "step_overhead_ms"):
        priors["step_overhead_ms"] = float(base.step_overhead_ms)
    factors = fit(fit_half, base, priors) if do_fit else dict(priors)
    report: dict[str, Any] = {"factors": {k: round(v, 4) for k, v in factors.items()},
                              "priors": priors, "entries": [],
                              "excluded": [{"id": i, "reason": r} for i, r in excluded]}
    for half, members in (("fit", fit_half), ("held_out", held)):
        rows = errors(members, base, factors)
        report[half] = summary(rows)
        report["entries"] += [{"id": c.id, "half": half, "layout": c.layout,
                               "published_step_s": round(c.published_s, 4), "predicted_step_s": round(p, 4),
                               "error_pct": round(100 * e, 1)} for c, p, e in rows]
    return report


def _print_rows(entries: list[dict[str, Any]]) -> None:
    print(f"{'id':48} {'half':8} {'layout':40} {'published':>10} {'predicted':>10} {'err%':>7}")
    for r in entries:
        print(f"{r['id']:48} {r['half']:8} {r['layout']:40} {r['published_step_s']:10.3f} "
              f"{r['predicted_step_s']:10.3f} {r['error_pct']:7.1f}")


def main(argv: list[str] | None = None) -> int:
    return validation_report.main(argv, __doc__.splitlines()[0], lambda do_fit: run(do_fit=do_fit), _print_rows)


if __name__ == "__main__":
    raise SystemExit(main())
