"""What a traced memory prediction is made of: the small programs traced, and how their peaks combine.

A run's per-rank peak (``orchestrator/predict/memory_trace.py``) is not always one trace of the run
itself. Deep models, many FSDP ranks and DeepSpeed are put together from a few traces of
smaller programs, the *leaves*:

- a model deeper than 4 layers: its 2- and 3-layer versions, extrapolated linearly in the
  layers (:func:`by_layers`);
- FSDP on more than 4 ranks: the 2- and 4-rank runs, as a + b/N (:func:`by_ranks`);
- DeepSpeed ZeRO 1-3: the plain model's forward and backward in DeepSpeed's dtype (a leaf of
  strategy :data:`FORWARD_BACKWARD`), plus DeepSpeed's documented sharded states and the buffers
  of its default configuration (:func:`deepspeed_bytes`).

Knowing the leaves without tracing anything lets a plan find every trace its runs need, trace
the missing ones side by side in worker processes (``memory.prefetch``), and then put every
run's prediction together here, in the planning process, without importing torch.

No torch here: the orchestrator imports this on login nodes that have none.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from orchestrator.predict import zero_step
from orchestrator.predict.memory_inputs import ACCUM_TRACED, DEEPSPEED, Inputs
from orchestrator.predict.states import model_state_bytes
from workloads.models.configs import param_sizes, total_params

# The strategy of a leaf that is the plain model's forward and backward, gradients kept, with every
# parameter in the leaf's precision (DeepSpeed's bf16/fp16 casts the model): no optimizer, no wrapper.
FORWARD_BACKWARD = "forward-backward"

# Models deeper than this are traced at 2 and 3 layers and extrapolated linearly in the number
# of layers (every block allocates the same, and a 48-layer step is tens of thousands of traced
# ops at ~0.1 ms each): exact where the peak falls in the same phase at 3 layers as at L. From
# 2 layers on it does (ddp, fsdp-full, fsdp-grad-op on 1, 2, 4 ranks, gpt2, gpt2-medium,
# gpt2-xl, fp16 and fp32: the 2-3 slope equals the 2-4 one to the byte); from 1 it does not
# (FSDP's peak moves).
EXTRAPOLATE_ABOVE = 4

# FSDP on more ranks than this is extrapolated from its traces at 2 and 4 ranks: a rank holds
# a + b/N bytes, b the sharded part (parameters, gradients, optimizer states: 1/N each) and a the
# rest (activations, a gathered block, the loss), which N does not change. 1 rank is not on that
# line (FSDP on one rank keeps no second copy to gather into). With context parallel the traces
# are at cp and 2 x cp ranks (dp 1 and 2; a depends on cp, the tokens a rank holds).
FSDP_EXTRAPOLATE_ABOVE = 4
FSDP = ("fsdp-full", "fsdp-grad-op")


def _fsdp_anchors(inputs: Inputs) -> tuple[int, int]:
    return (2, FSDP_EXTRAPOLATE_ABOVE) if inputs.cp == 1 else (inputs.cp, 2 * inputs.cp)

Value = Callable[[Inputs], int]


def normalized(inputs: Inputs) -> Inputs:
    """The inputs as traced: what does not change the peak set to the smallest value that gives it."""
    # A DDP rank holds the same on 2 ranks as on any more; with tensor parallel, 2 replicas as any
    # more (their gradients averaged in place); with context parallel, one group (dp 1) as more.
    ddp_ranks = 2 * inputs.tp if inputs.tp > 1 else max(2, inputs.cp)
    if inputs.strategy == "ddp" and inputs.devices > ddp_ranks:
        inputs = replace(inputs, devices=ddp_ranks)
    if inputs.accum > ACCUM_TRACED:
        # From the 4th micro-batch on, one allocates as the one before it (memory.ACCUM_TRACED).
        inputs = replace(inputs, accum=ACCUM_TRACED)
    return inputs


def forward_backward_leaf(inputs: Inputs) -> Inputs:
    """The plain model's forward and backward in DeepSpeed's dtype (fp16 traced as bf16: same bytes);
    one micro-batch, on one rank: shared by the ZeRO stages, rank counts and accumulation."""
    precision = "fp32" if inputs.precision in ("fp32", "tf32") else "bf16"
    return replace(inputs, strategy=FORWARD_BACKWARD, devices=1, precision=precision, accum=1)


def _depths(inputs: Inputs) -> list[Inputs]:
    if inputs.cfg.n_layer <= EXTRAPOLATE_ABOVE:
        return [inputs]
    return [replace(inputs, cfg=inputs.cfg.with_(n_layer=n)) for n in (2, 3)]


def leaves(inputs: Inputs) -> list[Inputs]:
    """The traces :func:`combine` reads to predict ``inputs`` (each traced and cached on its own)."""
    inputs = normalized(inputs)
    if inputs.strategy in DEEPSPEED:
        return _depths(forward_backward_leaf(inputs))
    if inputs.strategy in FSDP and inputs.devices > _fsdp_anchors(inputs)[1]:
        return [leaf for n in _fsdp_anchors(inputs) for leaf in _depths(replace(inputs, devices=n))]
    return _depths(inputs)


def by_layers(inputs: Inputs, value: Value) -> int:
    """The peak of ``inputs``' model at its depth, from its 2- and 3-layer traces beyond 4 layers."""
    layers = inputs.cfg.n_layer
    if layers <= EXTRAPOLATE_ABOVE:
        return value(inputs)
    two = value(replace(inputs, cfg=inputs.cfg.with_(n_layer=2)))
    three = value(replace(inputs, cfg=inputs.cfg.with_(n_layer=3)))
    return int(three + (three - two) * (layers - 3))


def by_ranks(inputs: Inputs, value: Value) -> int:
    """FSDP on N > 4 ranks: a + b/N through the 2- and 4-rank predictions (cp and 2 x cp with
    context parallel). Exact but for FSDP's padding of each parameter's first dimension to a
    multiple of N (at most one row per parameter and rank; none for the gpt2 sizes, whose
    dimensions N divides): traced directly at 8, 16 and 32 ranks, gpt2 .. gpt2-xxxl came out the
    same to the byte (tests/workloads/test_predict_memory.py checks 8)."""
    lo, hi = _fsdp_anchors(inputs)
    at_lo = by_layers(replace(inputs, devices=lo), value)
    at_hi = by_layers(replace(inputs, devices=hi), value)
    sharded = (at_lo - at_hi) * lo * hi / (hi - lo)  # b: b/lo - b/hi = at_lo - at_hi
    return int(round(at_hi - sharded / hi + sharded / inputs.devices))


def combine(inputs: Inputs, value: Value) -> int:
    """Peak bytes of one rank of ``inputs``, from ``value`` of each of its :func:`leaves`."""
    inputs = normalized(inputs)
    if inputs.strategy in DEEPSPEED:
        return deepspeed_bytes(inputs, by_layers(forward_backward_leaf(inputs), value))
    if inputs.strategy in FSDP and inputs.devices > _fsdp_anchors(inputs)[1]:
        return by_ranks(inputs, value)
    return by_layers(inputs, value)


# ------------------------------------------------------------------ DeepSpeed (analytic)
# DeepSpeed ZeRO 1-3 cannot run on fake tensors (its engine reads values and allocates in C++).
# Its part is DeepSpeed's documented behaviour, no fitted constant: the sharded model states of
# the ZeRO paper (states.model_state_bytes: ZeRO-1 4N + 12N/d, ZeRO-2 2N + 14N/d, ZeRO-3 16N/d
# for mixed-precision Adam) and the buffers its defaults allocate. The gpt2 workload passes
# DeepSpeed no bucket or stage-3 setting (workloads/strategies.py, _deepspeed: only
# "zero_optimization": {"stage": s}), so every one is the documented default
# (https://www.deepspeed.ai/docs/config-json/, "ZeRO Optimizations for FP16 Training"; the same
# values in deepspeed/runtime/zero/config.py of DeepSpeed 0.19.8, installed here):

# reduce_bucket_size: elements of the gradient bucket, allocated whole (in the gradients' dtype)
# when the backward starts, whatever the model's size (stage_1_and_2.py setup_buckets; stage3.py).
DS_REDUCE_BUCKET = 500_000_000
# allgather_bucket_size: how many elements the all-gather of the updated 16-bit weights moves at a
# time. It gathers into the flat weights themselves (runtime/utils.py all_gather_dp_groups), so
# it allocates nothing beyond them: named for completeness, not added.
DS_ALLGATHER_BUCKET = 500_000_000
# stage3_param_persistence_threshold: ZeRO-3 keeps parameters of at most this many elements whole
# on every rank (biases, LayerNorms); the larger ones are partitioned, 1/d on each rank.
DS_PERSISTENCE_THRESHOLD = 100_000
# stage3_prefetch_bucket_size: elements ZeRO-3 gathers ahead of the module that needs them.
DS_PREFETCH_BUCKET = 50_000_000
# stage3_max_live_parameters: at most this many gathered elements are live on a rank at once.
DS_MAX_LIVE_PARAMETERS = 1_000_000_000


def _width(inputs: Inputs) -> int:
    """Bytes of DeepSpeed's weights, gradients and buckets: its fp16/bf16 mode casts the model."""
    return 4 if inputs.precision in ("fp32", "tf32") else 2


def _partitioned(inputs: Inputs) -> int:
    """Parameters ZeRO-3 partitions (above the persistence threshold: the matrices)."""
    return sum(n for n in param_sizes(inputs.cfg) if n > DS_PERSISTENCE_THRESHOLD)


def deepspeed_gathered(inputs: Inputs) -> int:
    """ZeRO-3: elements gathered whole at once, at most: the module being computed and the prefetch
    bucket ahead of it, never past stage3_max_live_parameters nor the partitioned parameters."""
    largest = max(param_sizes(inputs.cfg))
    return min(_partitioned(inputs), DS_MAX_LIVE_PARAMETERS, largest + DS_PREFETCH_BUCKET)


def deepspeed_base(inputs: Inputs, forward_backward: int) -> float:
    """The traced and buffer part of :func:`deepspeed_bytes`: the model's forward and backward in
    DeepSpeed's dtype (``forward_backward``: whole weights and gradients, activations), for ZeRO-3
    with its partitioned weights and gradients at 1/d plus what it gathers, and the reduce bucket."""
    w = _width(inputs)
    f = float(forward_backward)
    if inputs.strategy == "zero3":
        f -= 2 * w * _partitioned(inputs) * (1 - 1 / inputs.devices)  # weights and gradients, 1/d of each
        f += w * deepspeed_gathered(inputs)
    return f + DS_REDUCE_BUCKET * w


def deepspeed_bytes(inputs: Inputs, forward_backward: int) -> int:
    """ZeRO stage 1-3 per rank, the larger of its two phases. The backward: ``deepspeed_base`` +
    the optimizer's sharded states, 12N/d: the fp32 master partition (4) and Adam's two moments (8)
    (the ZeRO paper's K = 12; in fp32 mode DeepSpeed keeps its own fp32 partition beside the
    model's weights as well). The optimizer step (:func:`deepspeed_step`). Every term is >= 0 and
    the traced forward/backward holds the whole 16-bit weights and gradients (ZeRO-3: their 1/d),
    so this is never below the sharded states (``states.model_state_bytes``)."""
    n = total_params(inputs.cfg)
    backward = deepspeed_base(inputs, forward_backward) + 12 * n / inputs.devices
    return int(max(backward, deepspeed_step(inputs)))


def deepspeed_step(inputs: Inputs) -> float:
    """The optimizer step's peak: the sharded states, the fp32 gradients DeepSpeed converts for the
    step and torch AdamW's foreach temporary (the gpt2 workload passes torch.optim.AdamW, foreach by
    default on CUDA; ``zero_step``), and ZeRO-3's reduce bucket (allocated once at start-up with
    contiguous gradients, stage3.py, and kept)."""
    n = total_params(inputs.cfg)
    stage = int(inputs.strategy[-1])
    w = _width(inputs)
    states = model_state_bytes(n, inputs.strategy, inputs.devices, "fp32" if w == 4 else "bf16")
    if w == 4:
        states += 4 * n / inputs.devices  # DeepSpeed's own fp32 partition beside the weights
    extra = zero_step.step_bytes(zero_step.step_elements(n / inputs.devices, stage), w, foreach_optimizer=True)
    bucket = DS_REDUCE_BUCKET * w if stage == 3 else 0
    return states + extra + bucket
