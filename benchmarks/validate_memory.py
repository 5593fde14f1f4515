"""Validate the memory model against published, cited measured peaks (issue 25).

    .venv/bin/python benchmarks/validate_memory.py [--json] [--no-fit]

Reads the memory entries of benchmarks/published/figures.yaml (metric peak_memory_gib,
device_memory_used_mb, max_memory_allocated_mb, max_memory_allocated_gb or peak_active_gib), predicts each run's
per-device peak with orch's analytic model (benchmarks/analytic_memory.py: sharded
states from states.py, Korthikanti et al.'s activations re-derived for the shape, the logits,
FSDP's gathered units), adds the device-level
terms that the published metric includes, splits the entries into a fit half and a held-out
half, fits the free factors on the fit half only, and prints per-entry predicted vs published
peak and the mean/max absolute % error of each half.

What each metric measured (the difference is modelled, not fitted away):
- peak_memory_gib (torchtitan): its metrics log the caching allocator's max *reserved* bytes
  (memory/max_reserved(GiB), torchtitan/components/metrics.py): every live tensor plus the
  allocator's cached, fragmented blocks; no CUDA context, no NCCL buffers (cudaMalloc'd outside
  the allocator). Predicted: allocated peak x ``reserve_max_reserved`` (the allocator factor).
- device_memory_used_mb (Hugging Face, NVML 'used'): the CUDA context as well (the same page
  measures it on the same V100: figures.yaml's ``also.cuda_context_mb``, 1343 MiB), plus the
  allocator's reserve. Predicted: context + allocated peak x ``reserve_nvml``.
- max_memory_allocated_mb (the ColossalAI-Pytorch-lightning GPT-2 benchmark's MemoryMonitor:
  torch.cuda.max_memory_allocated()/1024**2): live tensors only. Predicted: the allocated peak,
  no context, no reserve factor (these entries do not inform the fitted factors).

GPT-2 shapes (HF GPT2LMHeadModel: learned positions, 4h GeLU MLP, tied head, eager attention)
are the module's default ``Shape`` (not gated) with ``fused_attention=False``. Two terms the
module has no entry to need, added here for these runs, each a documented framework behaviour:
- ``ddp_buckets``: PyTorch DDP (dp > 1) with ``gradient_as_bucket_view=False`` (its default)
  copies the gradients into all-reduce buckets of the same total size (the DDP docstring:
  gradient_as_bucket_view=True "can reduce peak memory usage, where the saved memory size will
  be equal to the total gradients size"): one more gradient-sized buffer.
- the logits of a DeepSpeed fp16 run: the engine runs the model in half (no autocast), so the
  loss sees fp16 logits and its log-softmax output and both gradients are fp16 (2+2+2+2 bytes
  per element) where the module assumes torchtitan's fp32 upcast (2+4+4+4).
- ``hf_causal_masks``: HF GPT-2's 1-byte n_positions^2 mask buffer per layer.

A DeepSpeed ZeRO-3 run's peak is the larger of two phases: the backward (the terms above) and its
optimizer step (``analytic_memory.step_terms``: the states and the fp32 gradients DeepSpeed makes for
the step, ``orchestrator/predict/zero_step.py``, as ``orch plan``'s DeepSpeed model counts them), with
DeepSpeed configured as the entry's framework configured it (``LIGHTNING_ZERO3``).

Beside the analytic rows, ``PLAN_RUNS``: published runs whose program orch's gpt2 workload runs with
the published program's choices, predicted by the plan's own traced model (``plan`` rows, no factor).

Split rule (deterministic, documented): entries are grouped by (source url, device); groups are
taken in sorted order, each group's entries in sha256(id) order, and one running counter
alternates fit, held-out, fit, ... across all of them: every group of two or more has members on
both sides, and the fit half never exceeds the held-out half by more than one entry.

Blind entries (``blind:`` in figures.yaml, saying when and after which commit): figures added after
the model's terms were frozen, to test terms that were chosen with held-out rows in view. They are
in neither half, inform no factor, and are reported as they came out (the ``blind`` line). A blind
set whose misses then shaped the model is spent: its entries say so (``was_blind:``) and join the
halves like any other.

Programs (``Shape.program``, from the entry's framework): LitGPT's, Hugging Face transformers' Llama
and torchtune's layers are counted as their code saves (``analytic_memory.upcast_norm_layer``,
``torchtune_layer``); Lightning Fabric's FSDPStrategy is FSDP1 with use_orig_params (``Run.fabric_fsdp1``),
gradient accumulation under it keeps gradients unsharded (``no_sync_grads``); LitGPT's finetune loop
holds its fp32 logits through the backward (``loop_keeps_logits``); ZeRO-3 on a model loaded outside
deepspeed.zero.Init (an entry's ``deepspeed: {zero_init: false}``) keeps every gathered linear weight
(``kept_gathered_weights``); torch >= 2 frees gradients between steps (``fresh_grads``, without
accumulation); torchtune's packed sequences and chunked loss (``packed``, ``loss_chunks``). A run's
backward peak is the largest of its moments (``analytic_memory.backward_peak``: the loss's start, the
last layer's backward, the backward's end). torch.compile'd layers are counted as eager (an upper
bound). ``peak_active_gib`` (torchtune's 'Peak Memory Active'): active bytes, as allocated.

Free factors (two, each with a prior and a log-distance penalty, fitted by coordinate descent on the
mean absolute log error of the fit half): the caching allocator's reserved bytes over its allocated
peak (block rounding, cached free blocks, fragmentation), one per reserved measure:
``reserve_max_reserved`` (torchtitan's max reserved, a program whose multi-GiB loss buffers leave
cached blocks the next allocations cannot use) and ``reserve_nvml`` (NVML 'used', HF's BERT pages).
Prior 1.0 (none), bounded to [1.0, 1.5]; each multiplies every allocated term, never the context.
(Until 2026-11-27 one ``reserve`` served both; the torchtitan rows, read as allocated from torchtitan's
code, need about 1.15, the BERT rows about 1.0.)

Exclusions (printed with the reason, never silent): shapes whose MLP width is not in the
repository's cited tables (Llama 3.1 405B), runs whose activation recompute or pipeline
micro-batch is not published, CPU offload (parameters or optimizer states in host memory).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import validation_report  # noqa: E402
from benchmarks.analytic_memory import Run, Shape, backward_peak, step_terms, terms  # noqa: E402

HERE = Path(__file__).resolve().parent / "published"
MEMORY_METRICS = ("peak_memory_gib", "device_memory_used_mb", "max_memory_allocated_mb", "max_memory_allocated_gb",
                  "peak_active_gib")
GIB = 1024**3
MIB = 1024**2
# The issue's acceptance bound ("memory within 10% of published measured peaks"), on the held-out
# half: its mean and every entry. tests/unit/test_memory_validation.py asserts both. (The held-out
# max was 12.4% until DeepSpeed's optimizer step became a phase of its own, then 10.9% until torch
# 1.10's softmax input was counted: 3.3% on 2026-11-27; benchmarks/RESULTS.md says which terms were
# added with which held-out row in view.)
TARGET_MEAN, TARGET_MAX = 0.10, 0.10
# The blind entries: a first set (added after the terms were frozen at 6f291f9) came out at 23.6% mean,
# 34.9% max; their misses led to the program terms (LitGPT, HF Llama, ZeRO-3's kept weights), so they
# joined the halves (``was_blind:``). The second set (frozen at 2cf32b8, six entries of LitGPT's and
# torchtune's programs) came out at 1.3% mean, 5.6% max: held to the issue's bound, as the held-out half.
# One allocator factor per reserved measure (what the published figure counted beyond live tensors):
# torchtitan's max reserved (a program holding multi-GiB loss buffers) and NVML's 'used' (HF's BERT pages).
PRIORS = {"reserve_max_reserved": 1.0, "reserve_nvml": 1.0}
PRIOR_WEIGHT = 0.02  # penalty per unit |log(factor / prior)|: a mild pull, not a constraint

# Llama MLP widths and key/value heads: the same cited table as validate_published.py's
# LLAMA_LAYERS (oumi-ai/oumi configs/recipes/llama3_1/README.md for Llama 3/3.1 8B and 70B).
LLAMA = {"llama3.1-8b": (14336, 8), "llama3-8b": (14336, 8), "llama3.1-70b": (28672, 8), "llama3-70b": (28672, 8)}


@dataclasses.dataclass
class Case:
    """One usable entry: its predicted terms (bytes) and its published peak (bytes)."""

    id: str
    group: str
    device: str
    published: float
    parts: dict[str, float]
    context: float  # bytes the metric includes beyond the allocator (NVML: the CUDA context)
    layout: str
    reserve: str = ""  # the factor of the allocator's cache the metric includes ("": allocated bytes only)
    step_parts: dict[str, float] = dataclasses.field(default_factory=dict)  # DeepSpeed's step phase
    blind: bool = False  # added after the model was frozen: neither half, predicted once (``run``)

    def allocated(self) -> float:
        """The allocated peak: the larger phase, the backward's start or (DeepSpeed) the step."""
        return max(backward_peak(self.parts), sum(self.step_parts.values()))

    def predict(self, factors: dict[str, float]) -> float:
        return self.context + self.allocated() * (factors[self.reserve] if self.reserve else 1.0)


def _torch_before_1_11(e: dict[str, Any]) -> bool:
    """The entry's torch (``software.torch``, where the source or its date gives it) is older than
    1.11, whose softmax kept its input for the backward (``Shape.softmax_saves_input``)."""
    version = str((e.get("software") or {}).get("torch") or "")
    parts = version.split(".")
    return len(parts) >= 2 and parts[0] == "1" and parts[1].isdigit() and int(parts[1]) < 11


def _program(framework: str) -> str:
    """Whose code runs a Llama-style model's layers (``Shape.program``): LitGPT's GPT, torchtune's
    decoder, or Hugging Face transformers' Llama; anything else the generic accounting (torchtitan's)."""
    text = framework.lower()
    if "litgpt" in text:
        return "litgpt"
    if "torchtune" in text:
        return "torchtune"
    if "torchtitan" in text:
        return "torchtitan"
    if "transformers" in text or "hf " in text:
        return "hf-llama"
    return "generic"


def _frees_gradients(e: dict[str, Any]) -> bool:
    """The entry's program frees its gradients between steps: torch >= 2.0, whose optimizer zero_grad
    defaults to set_to_none=True (``software.torch``; torchtitan, which requires a torch 2 nightly,
    calls it at each step's start)."""
    version = re.search(r"\d+", str((e.get("software") or {}).get("torch") or ""))
    return bool(version and int(version.group()) >= 2) or "torchtitan" in str(e["framework"]).lower()


def _shape(model: dict[str, Any], softmax_saves_input: bool = False, framework: str = "") -> Shape | str:
    """The entry's shape, or why there is none."""
    name = str(model.get("name"))
    common = dict(layers=model["layers"], hidden=model["hidden"], heads=model["heads"], vocab=model["vocab"],
                  seq=model["seq"])
    kind = str(model.get("mlp_kind", "")).lower()
    if ("swiglu" in kind or "geglu" in kind) and model.get("mlp") and model.get("kv_heads"):
        # a Llama-style shape whose entry cites its own MLP width and key/value heads (fused attention:
        # SDPA/flash in the programs of these entries); a head dimension where the entry gives one
        return Shape(**common, ffn=int(model["mlp"]), kv_heads=int(model["kv_heads"]), gated=True,
                     head_dim=int(model.get("head_dim") or 0), program=_program(framework),
                     tied_head=bool(model.get("tied_embeddings")))
    if name.startswith("llama"):
        if name not in LLAMA:
            return f"{name}: MLP width not in the repository's cited shape tables"
        ffn, kv = LLAMA[name]
        return Shape(**common, ffn=ffn, kv_heads=kv, gated=True, program=_program(framework))
    if name.startswith("bert"):
        # HF BERT of the v4.27 era: eager attention (scores, softmax and dropout kept), a
        # sequence-classification head (no b x s x V logits).
        return Shape(**common, fused_attention=False, lm_head="classification" not in name,
                     softmax_saves_input=softmax_saves_input)
    if name.startswith("gpt2"):
        # HF GPT2LMHeadModel of 2022 (transformers 4.2x): eager attention (scores, softmax and
        # dropout kept), a tied b x s x V head; the module's default (ungated) shape.
        return Shape(**common, fused_attention=False, softmax_saves_input=softmax_saves_input)
    return f"{name}: no shape rule"


def _recompute(value: Any, framework: str) -> str | None:
    """'full', 'none', or torchtitan's 'selective' as its op-level policy ('op': the option its
    llama3_8b.toml preset sets, ``selective_ac_option = 'op'``; the benchmark tables say only
    "Selective activation checkpointing"). None: not published, or a selective mode we do not model."""
    if value is None:
        return None
    text = str(value).lower()
    if text in ("full", "none"):
        return text
    if text.startswith("full ("):  # "full (every decoder layer)", "full (torch.utils.checkpoint around every ...)"
        return "full"
    return "op" if "selective" in text and "torchtitan" in framework.lower() else None


def _precision(text: str) -> str:
    """bf16/fp16 (16-bit training), amp (torch.autocast over fp32 weights, HF Trainer's fp16=True), fp32."""
    text = text.lower()
    if "amp" in text:
        return "amp"
    return "bf16" if "bf16" in text else "fp16" if "16" in text else "fp32"


def _case(e: dict[str, Any]) -> Case | str:
    """The entry as a Case, or the reason it is left out."""
    shape = _shape(e["model"], _torch_before_1_11(e), str(e["framework"]))
    if isinstance(shape, str):
        return shape
    layout = e["layout"]
    recompute = _recompute(layout.get("activation_recompute"), str(e["framework"]))
    if recompute is None:
        return f"activation recompute {layout.get('activation_recompute')!r}: not published or not modelled"
    tp, pp = int(layout.get("tp") or 1), int(layout.get("pp") or 1)
    if pp > 1 and not layout.get("micro_batch"):
        return "pipeline micro-batch not published (the first stage's in-flight activations depend on it)"
    if layout.get("offload"):
        return f"CPU offload ({layout['offload']}): host-resident states are not modelled"
    dp = int(layout.get("dp") or e["devices"] // (tp * pp))
    zero = str(layout.get("zero") or "").lower()
    strategy = ("fsdp-full" if ("fsdp" in zero or "full_shard" in zero)
                else "zero3" if ("zero-3" in zero or "zero3" in zero) else "ddp")
    # torchtitan's "local batch" is per data-parallel rank, shared by its tp ranks.
    precision = _precision(str(e["precision"]))
    pure16 = str(e["precision"]).lower().startswith("pure")  # "pure bf16": no fp32 master, no logit upcast
    framework = str(e["framework"]).lower()
    deepspeed = {}
    if strategy == "zero3":
        deepspeed = LIGHTNING_ZERO3 if "lightning" in framework else DEEPSPEED_ZERO3
    # DeepSpeed's fp16 engine runs the model in half (no autocast): the loss sees fp16 logits unless the
    # model upcasts them (HF Llama's forward does, logits.float(); HF GPT-2 of 2022 does not).
    half_logits = precision == "fp16" and "deepspeed" in framework and not shape.gated
    micro_batch = int(layout["micro_batch"])
    accumulation = int(layout.get("global_batch") or 0) > dp * micro_batch
    fabric_fsdp = "fsdpstrategy" in framework  # Lightning Fabric's FSDPStrategy: FSDP1 (2024)
    run = Run(dp=dp, tp=tp, pp=pp, strategy=strategy, micro_batch=micro_batch,
              recompute=recompute, precision=precision, pure16=pure16, half_logits=half_logits,
              fabric_fsdp1=fabric_fsdp, no_sync_grads=fabric_fsdp and accumulation,
              loop_keeps_logits="finetune/full.py" in framework,
              packed="packed=true" in framework.replace(" ", ""), loss_chunks=_loss_chunks(framework),
              kept_gathered_weights=strategy == "zero3" and (e.get("deepspeed") or {}).get("zero_init") is False,
              fresh_grads=not accumulation and _frees_gradients(e), **deepspeed)
    parts = terms(shape, run)
    step = step_terms(shape, run, **_deepspeed_step_config(str(e["framework"]))) if strategy == "zero3" else {}
    if str(e["model"]["name"]).startswith("gpt2"):
        # HF GPT2Attention of 2022 registers a 1-byte causal mask of n_positions^2 per layer as a
        # buffer (transformers 4.2x modeling_gpt2.py, register_buffer("bias", torch.tril(...))):
        # on the device in both phases. n_positions = seq here (the benchmark's max_seq_len).
        parts["hf_causal_masks"] = shape.layers * shape.seq**2
        if step:
            step["hf_causal_masks"] = parts["hf_causal_masks"]
    params = (shape.layers * shape.layer_params() + shape.embedding_params()) / tp
    if strategy == "ddp" and dp > 1:
        parts["ddp_buckets"] = params * (4 if precision in ("fp32", "amp") else 2)

    reserve = "reserve_max_reserved"
    if e["metric"] == "max_memory_allocated_mb":
        published, context, reserve = float(e["value"]) * MIB, 0.0, ""  # /1024**2: MiB
    elif e["metric"] == "max_memory_allocated_gb":
        published, context, reserve = float(e["value"]) * 1e9, 0.0, ""  # /1e9: decimal GB
    elif e["metric"] == "peak_active_gib":
        published, context, reserve = float(e["value"]) * GIB, 0.0, ""  # active bytes: allocated-like
    elif e["metric"] == "device_memory_used_mb":
        published = float(e["value"]) * MIB  # NVML 'used' printed as //1024**2: MiB
        context = float((e.get("also") or {}).get("cuda_context_mb") or CONTEXT_MIB[e["device"]]) * MIB
        reserve = "reserve_nvml"
    else:
        published, context = float(e["value"]) * GIB, 0.0
    name = f"{strategy} dp{dp} tp{tp} pp{pp} mb{run.micro_batch} {recompute} {precision}"
    return Case(e["id"], str(e["url"]), e["device"], published, parts, context, name, reserve, step,
                bool(e.get("blind")))


# ZeRO-3 as PyTorch Lightning 1.7's DeepSpeedStrategy configured DeepSpeed v0.7.0 (the versions
# current in Aug 2022; Lightning src/pytorch_lightning/strategies/deepspeed.py defaults, the same in
# 1.7.0-1.7.4): remote_device="cpu" (the 16-bit parameter partitions in host memory) and
# reduce_bucket_size=2e8 with contiguous_gradients=True (DeepSpeed stage3.py keeps the bucket).
LIGHTNING_ZERO3: dict[str, Any] = {"host_params": True, "reduce_bucket": 200_000_000}
# ZeRO-3 at DeepSpeed's own defaults (HF Trainer with a ds_config naming only the stage): the model's
# partitions on the device, reduce_bucket_size 5e8 (docs "ZeRO Optimizations for FP16 Training").
DEEPSPEED_ZERO3: dict[str, Any] = {"reduce_bucket": 500_000_000}


def _loss_chunks(framework: str) -> int:
    """The sequence chunks of a chunked loss over the logits (torchtune's CEWithChunkedOutputLoss), else 0."""
    found = re.search(r"num_output_chunks\s*=\s*(\d+)", framework)
    return int(found.group(1)) if found and "chunkedoutputloss" in framework.replace("_", "") else 0


def _deepspeed_step_config(framework: str) -> dict[str, Any]:
    """The step's sub-group and optimizer as the entry's framework configured DeepSpeed: PyTorch
    Lightning 1.7's DeepSpeedStrategy passes sub_group_size=1e12 (its own default: the whole
    partition in one step call), DeepSpeed's default is 1e9. A torch AdamW handed to DeepSpeed steps
    with its foreach temporary; DeepSpeed's own optimizer (FusedAdam, or a ds_config "optimizer")
    updates in place."""
    text = framework.lower()
    return {"sub_group_size": 1e12 if "lightning" in text else 1e9, "foreach_optimizer": "torch.optim.adamw" in text}


# The CUDA context on the V100 of the Hugging Face pages: measured there (model_memory_anatomy,
# figures.yaml hf-bert-large-v100-16gb-fp32-bs4-mem, also.cuda_context_mb); the perf_train_gpu_one
# page runs the same series on the same device type.
CONTEXT_MIB = {"V100-SXM2-16GB": 1343.0}


# Published runs whose program orch's gpt2 workload runs with the published program's choices: the
# plan's own prediction (orchestrator/predict/memory.py: the workload's step traced, as `orch plan`
# predicts it) beside the published peak, no factor. The ColossalAI/Lightning DDP row: HF GPT-2 XL
# with every block checkpointed, eager attention, dropout 0.1 (GPT2Config's default), fp16 AMP, and
# the gradients zeroed in place between steps (Lightning 1.7 called optimizer.zero_grad() on the
# torch 1.x of 2022, whose default was set_to_none=False). Not run the same: HF's loss copies the
# shifted logits (b x (s-1) x V, 16-bit) and the 1-byte causal masks (hf_causal_masks above), which
# orch's model does not hold; the trace runs on the CPU (fp16 traced as bf16: the same bytes).
PLAN_RUNS: dict[str, dict[str, Any]] = {
    "colossal-lightning-gpt2xl-a100-40gb-ddp-amp-4gpu-mem": {
        "model": "gpt2-xl", "strategy": "ddp", "devices": 4, "precision": "fp16", "batch_size": 6,
        "seq_len": 1024, "activation_checkpointing": "full", "attention": "manual", "dropout": 0.1,
        "zero_grad": "zeros"},
}


def plan_rows(cases: list[Case]) -> list[dict[str, Any]]:
    """The plan's traced prediction of each :data:`PLAN_RUNS` entry beside its published peak."""
    from orchestrator.predict import memory

    published = {c.id: c.published for c in cases}
    rows = []
    for entry, p in PLAN_RUNS.items():
        predicted, how = memory.predicted("gpt2", p, memory.predict_bytes)
        pub = published[entry]
        rows.append({"id": entry, "half": "plan", "layout": " ".join(f"{k}={v}" for k, v in p.items()),
                     "published_gib": round(pub / GIB, 2), "predicted_gib": round(predicted / GIB, 2),
                     "tensors_only_gib": round(predicted / GIB, 2),
                     "error_pct": round(100 * (predicted - pub) / pub, 1),
                     "parts_gib": {how: round(predicted / GIB, 2)}, "step_parts_gib": {}})
    return rows


def load_cases(figures: Path = HERE / "figures.yaml") -> tuple[list[Case], list[tuple[str, str]]]:
    """(usable entries, (id, reason) of every memory entry left out)."""
    cases: list[Case] = []
    excluded: list[tuple[str, str]] = []
    for e in yaml.safe_load(figures.read_text()):
        if e["metric"] not in MEMORY_METRICS:
            continue  # time figures: validate_published.py
        case = _case(e)
        if isinstance(case, str):
            excluded.append((e["id"], case))
        else:
            cases.append(case)
    return cases, excluded


def split(cases: list[Case]) -> tuple[list[Case], list[Case]]:
    """(fit, held-out): one counter alternating over (url, device) groups, sha256(id) order within,
    the held-out half first, so that with an odd count the fit half is the smaller (at most half)."""
    groups: dict[tuple[str, str], list[Case]] = {}
    for c in cases:
        groups.setdefault((c.group, c.device), []).append(c)
    ordered = [c for key in sorted(groups)
               for c in sorted(groups[key], key=lambda c: hashlib.sha256(c.id.encode()).hexdigest())]
    return ordered[1::2], ordered[0::2]


def halves(cases: list[Case]) -> tuple[list[Case], list[Case], list[Case]]:
    """(fit, held-out, blind): the blind entries in neither half (they inform no factor)."""
    fit_half, held = split([c for c in cases if not c.blind])
    return fit_half, held, [c for c in cases if c.blind]


def errors(cases: list[Case], factors: dict[str, float]) -> list[tuple[Case, float, float]]:
    """(case, predicted bytes, signed relative error) of each case."""
    return [(c, p, (p - c.published) / c.published) for c in cases for p in [c.predict(factors)]]


def fit(cases: list[Case], priors: dict[str, float] = PRIORS) -> dict[str, float]:
    """Factors minimising mean |log(pred/pub)| + PRIOR_WEIGHT x sum |log(f/prior)|, by coordinate descent."""
    def loss(fs: dict[str, float]) -> float:
        data = sum(abs(math.log(p / c.published)) for c, p, _ in errors(cases, fs)) / len(cases)
        return data + PRIOR_WEIGHT * sum(abs(math.log(fs[k] / priors[k])) for k in fs)

    # reserved >= allocated; beyond 1.5 it would be hiding a missing term
    return validation_report.descend(loss, dict(priors), lambda k, v: 1.0 <= v <= 1.5, 1.001)


def summary(rows: list[tuple[Case, float, float]]) -> dict[str, float]:
    return validation_report.summary([e for _, _, e in rows])


def run(do_fit: bool = True) -> dict[str, Any]:
    cases, excluded = load_cases()
    fit_half, held, blind = halves(cases)
    factors = fit(fit_half) if do_fit else dict(PRIORS)
    report: dict[str, Any] = {"factors": {k: round(v, 4) for k, v in factors.items()}, "priors": PRIORS,
                              "entries": [], "excluded": [{"id": i, "reason": r} for i, r in excluded]}
    groups = [("fit", fit_half), ("held_out", held)] + ([("blind", blind)] if blind else [])
    for half, members in groups:
        rows = errors(members, factors)
        report[half] = summary(rows)
        report["entries"] += [{"id": c.id, "half": half, "layout": c.layout,
                               "published_gib": round(c.published / GIB, 2), "predicted_gib": round(p / GIB, 2),
                               "tensors_only_gib": round(c.allocated() / GIB, 2),
                               "error_pct": round(100 * e, 1),
                               "parts_gib": {k: round(v / GIB, 2) for k, v in c.parts.items()},
                               "step_parts_gib": {k: round(v / GIB, 2) for k, v in c.step_parts.items()}}
                              for c, p, e in rows]
    plan = plan_rows(cases)
    report["plan"] = validation_report.summary([r["error_pct"] / 100 for r in plan])
    report["entries"] += plan
    return report


def _print_rows(entries: list[dict[str, Any]]) -> None:
    print(f"{'id':48} {'half':8} {'layout':38} {'pub GiB':>8} {'pred':>7} {'err%':>6}  parts (GiB)")
    for r in entries:
        step = f"  step phase {r['step_parts_gib']}" if r["step_parts_gib"] else ""
        print(f"{r['id']:48} {r['half']:8} {r['layout']:38} {r['published_gib']:8.2f} {r['predicted_gib']:7.2f} "
              f"{r['error_pct']:6.1f}  {r['parts_gib']}{step}")


def main(argv: list[str] | None = None) -> int:
    return validation_report.main(argv, __doc__.splitlines()[0], lambda do_fit: run(do_fit=do_fit), _print_rows)


if __name__ == "__main__":
    raise SystemExit(main())
