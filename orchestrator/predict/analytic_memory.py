"""Analytic per-device peak of a training run whose shape no trace serves (Llama, BERT; issue 25).

No torch. Used by ``benchmarks/validate_memory.py`` to compare orch's memory model with
published measured peaks; ``orch plan`` does not use it (its skip decisions are unchanged).

Terms, in bytes on the most loaded device, at the start of the backward (every saved
activation still live, the loss's gradient just made):
- states: ``states.model_state_bytes`` (ZeRO paper, SC20 section 5: 16N/d under ZeRO-3 / FSDP
  full shard, 16N replicated) of the rank's parameters (one tp shard of the largest stage);
- activations: Korthikanti et al. 2022 (perf-model.md: s*b*h*(34 + 5*a*s/h) 16-bit bytes a
  GPT layer saves), re-derived per layer for the shape and precision (``saved_per_token``);
  full recompute keeps each layer's input plus one layer recomputed whole; tp divides all of it
  (sequence parallel); the first pipeline stage holds pp micro-batches (1F1B);
- logits: b*s*V/tp elements at 2 + 4 + 4 + 4 bytes: the 16-bit logits (the training loop holds
  them until the backward), cross-entropy's fp32 log-softmax output (saved for its backward),
  the fp32 gradient of the log-probabilities and of the logits (``memory.activation_bytes``
  counts 16-bit + 4 + 4, the forward's end; the backward's first step adds one fp32 tensor);
- FSDP's working set, which a sharded-state trace cannot see: the current unit's gathered
  16-bit parameters plus the next unit's (FSDP prefetches one unit ahead: Zhao et al. 2023,
  "PyTorch FSDP", VLDB, backward/forward prefetching) and one unit's unsharded fp32 gradient
  before its reduce-scatter;
- tp_gathered_inputs (torchtitan's tensor parallel only): the full-sequence inputs that DTensor's
  sequence parallel all-gathers and autograd saves.
Device-level terms (CUDA context, the caching allocator's reserve) are the caller's: they depend
on what the published figure measured (NVML 'used' vs the allocator's max reserved).
"""

from __future__ import annotations

import dataclasses
import math

from orchestrator.predict import zero_step
from orchestrator.predict.states import model_state_bytes

# Bytes per element of the 16-bit logits, the fp32 log-softmax output, and the two fp32 gradients.
LOGIT_BYTES_16BIT = 2 + 4 + 4 + 4
LOGIT_BYTES_FP32 = 4 + 4 + 4


@dataclasses.dataclass(frozen=True)
class Shape:
    """A transformer: GPT/BERT (4h GeLU MLP, every head its own k/v) unless ``gated`` (Llama)."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    ffn: int = 0
    kv_heads: int = 0
    gated: bool = False
    fused_attention: bool = True
    # torch < 1.11: softmax's backward kept its input as well as its output (SoftmaxBackward0 saved
    # self_ and result_ in 1.10; only result_ from 1.11, pytorch PR #66018): one more b*a*s*s
    # tensor per layer with eager attention.
    softmax_saves_input: bool = False
    lm_head: bool = True  # False: a classifier (no b*s*V logits)

    @property
    def mlp_width(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv_ratio(self) -> float:
        return (self.kv_heads or self.heads) / self.heads

    def layer_params(self) -> int:
        h = self.hidden
        attn = 2 * h * h + 2 * h * int(h * self.kv_ratio)
        mlp = (3 if self.gated else 2) * h * self.mlp_width
        if self.gated:
            return attn + mlp + 2 * h  # two RMSNorm weights, no biases
        return attn + mlp + 4 * h + h + self.mlp_width + 4 * h  # q/k/v/out and MLP biases, two LayerNorms

    def embedding_params(self) -> int:
        # Llama: untied input embedding and output head; GPT/BERT: one tied table (BERT's
        # position/type tables and pooler are under 1% and left out).
        return self.vocab * self.hidden * (2 if self.gated else 1)


@dataclasses.dataclass(frozen=True)
class Run:
    dp: int
    tp: int = 1
    pp: int = 1
    strategy: str = "fsdp-full"  # as states.model_state_bytes names them
    micro_batch: int = 1
    recompute: str = "none"  # none | op (torchtitan's op-level selective) | full
    precision: str = "bf16"  # bf16/fp16 (16-bit activations), amp (torch.autocast over fp32), fp32
    # DeepSpeed ZeRO-3 as PyTorch Lightning 1.7's DeepSpeedStrategy configured it: deepspeed.zero.Init
    # with remote_device="cpu" (its default then) keeps each rank's 16-bit parameter partition in host
    # memory (DeepSpeed v0.7.0 partition_parameters.py: the partition is made on remote_device and
    # all-gathered up from there), so the device holds 14 of the 16 bytes per sharded parameter.
    host_params: bool = False
    reduce_bucket: float = 0  # elements of DeepSpeed's reduce bucket (kept whole with contiguous gradients)
    # Pure 16-bit training (Lightning's "bf16-true", torchtune's dtype=bf16): the weights, gradients and
    # Adam's moments all in 16 bits, no fp32 master copy (8 bytes a parameter, not 16); its loss sees
    # 16-bit logits (``half_logits``).
    pure16: bool = False
    # The loss sees 16-bit logits, no fp32 upcast (a model run in half without autocast: pure 16-bit
    # training, DeepSpeed's fp16 engine on a model that does not upcast): 2+2+2+2 bytes an element.
    half_logits: bool = False


def saved_per_token(shape: Shape, precision: str, recompute: str = "none") -> float:
    """Bytes one layer saves for its backward, per token (Korthikanti et al.'s accounting).

    GPT/BERT, 16-bit: 34h + 5as (attention 11h + 5as: q/k/v input 2h, q and k 4h, softmax output
    2as, dropout mask as, dropout output 2as, v 2h, projection input 2h, mask h; MLP 19h; the
    two LayerNorm inputs 4h); the 5as term goes with fused attention. fp32: every tensor twice but
    the 1-byte masks: 66h + 9as. amp (torch.autocast, fp32 weights): LayerNorm and softmax run
    in fp32 (autocast's float32 op list), every linear saves a 16-bit cast of its input (BERT's
    q, k and v are three linears: three casts): attention 19h + 7as, MLP 23h: 42h + 7as.
    Llama (RMSNorm, GQA with g = kv/heads, SwiGLU of width F, no dropout, fused attention),
    16-bit: norm inputs 4h, q/k/v input 2h, q 2h, k and v 4gh, attention output 2h, MLP input 2h,
    gate, up, silu(gate) and their product 8F: (12 + 4g)h + 8F. Under torchtitan's op-level
    selective recompute (save the outputs of mm and SDPA, except every second mm, recompute the
    rest: torchtitan parallelize_llama.py ``_custom_policy``) a block keeps its input 2h, wq's 2h,
    wv's 2gh, SDPA's 2h, w1's 2F and w2's 2h: (8 + 2g)h + 2F.
    """
    h, a, s, g, f = shape.hidden, shape.heads, shape.seq, shape.kv_ratio, shape.mlp_width
    if shape.gated:
        per = (8 + 2 * g) * h + 2 * f if recompute == "op" else (12 + 4 * g) * h + 8 * f
        return per * (2 if precision == "fp32" else 1)
    scores = 0 if shape.fused_attention else a * s
    kept_input = scores if shape.softmax_saves_input else 0  # torch < 1.11 (Shape.softmax_saves_input)
    if precision == "fp32":
        return 66 * h + 9 * scores + 4 * kept_input
    if precision == "amp":
        # the scores plus HF's fp32 additive mask promote to fp32: softmax's input is fp32 too
        return 42 * h + 7 * scores + 4 * kept_input
    return 34 * h + 5 * scores + 2 * kept_input


def terms(shape: Shape, run: Run) -> dict[str, float]:
    """Bytes of each term on the most loaded rank (the first pipeline stage, or the only one)."""
    layers_here = math.ceil(shape.layers / run.pp)
    params_here = _params_here(shape, run)
    out: dict[str, float] = {"states": _states(params_here, run)}
    if run.reduce_bucket:
        out["zero_reduce_bucket"] = run.reduce_bucket * _width(run)
    if run.precision == "amp":
        # fp32 weights and gradients and Adam's moments are the 16N; autocast also caches every
        # weight's 16-bit copy for the forward (2N).
        out["amp_weight_cache"] = 2 * params_here
    tokens = run.micro_batch * shape.seq / run.tp
    width = 4 if run.precision == "fp32" else 2
    whole_layer = saved_per_token(shape, run.precision) * tokens
    if run.recompute == "full":
        kept = layers_here * width * shape.hidden * tokens + whole_layer  # inputs + one layer recomputed
    elif run.recompute == "op":
        kept = layers_here * saved_per_token(shape, run.precision, "op") * tokens + whole_layer
    else:
        kept = layers_here * whole_layer
    out["activations"] = kept * run.pp  # 1F1B: the first stage holds pp micro-batches in flight
    if run.tp > 1 and shape.gated:
        # torchtitan's sequence parallel (DTensor): a column-parallel linear all-gathers its
        # sequence-sharded input and autograd saves the gathered tensor (Megatron instead
        # re-gathers in the backward, Korthikanti et al. section 4.2.2): the attention and MLP
        # norm outputs of each layer that keeps activations (one, recomputed, under full or op
        # recompute) and the final norm's output for the output head, at full sequence.
        full_layers = layers_here if run.recompute == "none" else 1
        gathered = (2 * full_layers + 1) * width * shape.hidden * run.micro_batch * shape.seq
        out["tp_gathered_inputs"] = gathered * (1 - 1 / run.tp)
    if shape.lm_head and run.pp == 1:
        per_logit = (LOGIT_BYTES_FP32 if run.precision == "fp32"
                     else 2 + 2 + 2 + 2 if run.pure16 or run.half_logits else LOGIT_BYTES_16BIT)
        out["logits"] = tokens * shape.vocab * per_logit
    if run.strategy in ("fsdp-full", "zero3") and run.dp > 1:
        unit = shape.layer_params() / run.tp
        grad = 2 if run.pure16 else 4  # one unit's unsharded gradient before its reduce-scatter
        out["fsdp_working_set"] = 2 * unit * 2 + unit * grad  # two gathered 16-bit units + one gradient
    return out


def step_terms(shape: Shape, run: Run, sub_group_size: float = zero_step.DS_SUB_GROUP_SIZE,
               foreach_optimizer: bool = True) -> dict[str, float]:
    """A DeepSpeed ZeRO run's other phase, its optimizer step: the sharded states and the fp32
    gradients (and optimizer temporaries) of ``zero_step`` (empty for other strategies). The run's
    peak is the larger of this and :func:`terms`, which is the backward's start."""
    if run.strategy not in ("zero1", "zero2", "zero3"):
        return {}
    params_here = _params_here(shape, run)
    elements = zero_step.step_elements(params_here / run.dp, int(run.strategy[-1]), sub_group_size)
    out = {"states": _states(params_here, run),
           "zero_step": zero_step.step_bytes(elements, _width(run), foreach_optimizer)}
    if run.reduce_bucket:
        out["zero_reduce_bucket"] = run.reduce_bucket * _width(run)
    return out


def _params_here(shape: Shape, run: Run) -> float:
    """Parameters on the most loaded rank before data-parallel sharding: the first stage's layers and
    (with pp > 1) its input table only, over tp."""
    embedding = shape.embedding_params() / (2 if run.pp > 1 else 1)
    return (math.ceil(shape.layers / run.pp) * shape.layer_params() + embedding) / run.tp


def _width(run: Run) -> int:
    """Bytes of the run's gradients and DeepSpeed's buckets: 4 in fp32 training, else 2."""
    return 4 if run.precision == "fp32" else 2


def _states(params_here: float, run: Run) -> float:
    """The rank's sharded states on the device: ``states.model_state_bytes``, less the 16-bit
    parameter partition where ZeRO-3 keeps it in host memory (``Run.host_params``)."""
    precision = "fp32" if run.precision in ("fp32", "amp") else run.precision
    if run.pure16:
        # every state 16-bit (weights 2, gradients 2, moments 4): half of fp32 training's bytes,
        # sharded the same way (states.model_state_bytes' fp32 cases)
        states = model_state_bytes(int(params_here), run.strategy, run.dp, "fp32") / 2
    else:
        states = model_state_bytes(int(params_here), run.strategy, run.dp, precision)
    if run.host_params and run.strategy == "zero3" and precision in ("fp16", "bf16"):
        states -= 2 * params_here / run.dp
    return states
