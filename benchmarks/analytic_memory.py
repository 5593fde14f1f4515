"""Analytic per-device peak of a training run whose shape no trace serves (Llama, BERT; issue 25).

No torch. Used by ``benchmarks/validate_memory.py`` to compare an analytic model with published
measured peaks. Not part of orch (moved out of orchestrator/predict/, issue 46): ``orch plan``,
its skips and ``orch predict`` use one model, ``orchestrator/predict/run_memory.py``.

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

Which program runs the layers matters as much as the shape (``Shape.program``): the default
("generic") is the accounting above; "litgpt" (LitGPT's GPT, litgpt/model.py of 2024), "hf-llama"
(Hugging Face transformers' LlamaForCausalLM of 2024) and "torchtune" (its decoder of late 2024) are
their own eager programs, read from their code (``upcast_norm_layer``, ``torchtune_layer``): RMSNorm
upcasts to fp32 and keeps the fp32 copy, k and v are expanded to every query head before attention,
and the loss sees fp32 logits; "torchtitan" (late 2024) is the generic layer with its own loss, head
and FSDP2 terms (``_torchtitan_terms``). Where a framework keeps more than the model (FSDP1's
gathered root and gradient joins, unsharded gradients under ``no_sync``, ZeRO-3's gathered weights
kept by autograd), a ``Run`` field says so, each citing the code it was read from; a run's peak is
the largest moment of its backward (``backward_peak``) or its optimizer step (``step_terms``).
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
    head_dim: int = 0  # per attention head; 0: hidden / heads (Gemma's is 256 at hidden 2048, 8 heads)
    program: str = "generic"  # whose code: generic | litgpt | hf-llama | torchtune | torchtitan (module docstring)
    tied_head: bool = False  # a gated model whose output head is its input embedding (Llama 3.2 1B/3B)

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the attention output): heads x head dimension."""
        return self.heads * (self.head_dim or self.hidden // self.heads)

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values) as the projections make them, before any expansion."""
        return (self.kv_heads or self.heads) * (self.head_dim or self.hidden // self.heads)

    @property
    def mlp_width(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv_ratio(self) -> float:
        return (self.kv_heads or self.heads) / self.heads

    def linear_params(self) -> int:
        """A layer's matrices: q, k, v, the output projection and the MLP's two or three."""
        h = self.hidden
        return 2 * h * self.q_width + 2 * h * self.kv_width + (3 if self.gated else 2) * h * self.mlp_width

    def layer_params(self) -> int:
        h = self.hidden
        if self.gated:
            return self.linear_params() + 2 * h  # two RMSNorm weights, no biases
        return self.linear_params() + 4 * h + h + self.mlp_width + 4 * h  # q/k/v/out and MLP biases, two LayerNorms

    def embedding_params(self) -> int:
        # Llama: untied input embedding and output head; GPT/BERT: one tied table (BERT's
        # position/type tables and pooler are under 1% and left out).
        return self.vocab * self.hidden * (2 if self.gated and not self.tied_head else 1)


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
    # Lightning Fabric's FSDPStrategy of 2024: FSDP1 (FullyShardedDataParallel) with use_orig_params=True.
    # The root unit's parameters (those in no wrapped block: the embedding, the head, the final norm)
    # stay gathered from the forward through the backward (_post_forward_reshard skips the root; its
    # embedding's gradient comes last). With use_orig_params each parameter's gradient is a tensor of
    # its own until the unit's last one arrives, then they are joined into one unit-sized gradient:
    # the head's gradient is held through the whole backward, and at its end the embedding's
    # gradient and the joined root gradient are live beside it; a block's gradients and their join
    # are live while its backward ends (reading of litgpt's finetune runs, RESULTS.md).
    fabric_fsdp1: bool = False
    # Gradient accumulation under FSDP1's no_sync() (Fabric's no_backward_sync): every unit's gradient
    # accumulates unsharded on each rank until the synchronising micro-step (FSDP's no_sync docstring:
    # gradients are accumulated "in unsharded form"), in place of the rank's gradient shard.
    no_sync_grads: bool = False
    # ZeRO-3 on a model not built under deepspeed.zero.Init (HF Trainer given a model loaded before its
    # TrainingArguments): F.linear stays torch's, whose autograd saves a view of each gathered 16-bit
    # weight; DeepSpeed's release (``param.data = torch.empty(0)``, DeepSpeed v0.14.2
    # partition_parameters.py free_param) frees nothing while that view is saved, so every linear's
    # full weight lives until its backward. Under zero.Init's context DeepSpeed swaps F.linear for its
    # own function (zero3_linear_wrap), which saves the Parameter, and the release frees the weight.
    kept_gathered_weights: bool = False
    # torch.optim.AdamW's multi-tensor ("foreach") step outside DeepSpeed (its default on CUDA): one
    # temporary the size of the parameters it steps, in their dtype (``_foreach_sqrt(exp_avg_sqs)``).
    foreach_step: bool = False
    # No gradient exists at the backward's start: torch >= 2.0's zero_grad(set_to_none=True) freed them
    # after the last step and no micro-step of this step has made any yet (no gradient accumulation).
    fresh_grads: bool = False
    # Sequences packed several to a sample, each token's position passed to the model (torchtune's
    # packed datasets): RoPE gathers its table's rows per token (``torchtune_layer``).
    packed: bool = False
    # The loss over the logits in this many sequence chunks, each upcast to fp32 inside the loss
    # (torchtune's CEWithChunkedOutputLoss): the 16-bit chunks are kept (2 bytes an element), each
    # chunk's fp32 log-softmax is saved (4), and one chunk's fp32 gradients are live at a time.
    loss_chunks: int = 0
    # The training loop holds the (fp32) logits through the backward (litgpt/finetune/full.py: ``logits``
    # stays bound in the loop's scope while ``fabric.backward`` runs): 4 of the loss's bytes an element
    # live in every moment of the backward.
    loop_keeps_logits: bool = False


def saved_per_token(shape: Shape, precision: str, recompute: str = "none", packed: bool = False) -> float:
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
    if shape.program == "torchtune":
        return torchtune_layer(shape, packed) * (2 if precision == "fp32" else 1)
    if shape.program in UPCAST_NORM_PROGRAMS:  # 16-bit as read (their op-level recompute is torchtitan's only)
        return upcast_norm_layer(shape) * (2 if precision == "fp32" else 1)
    if shape.gated:
        per = (8 + 2 * g) * h + 2 * f if recompute == "op" else (12 + 4 * g) * h + 8 * f
        if recompute == "op" and shape.program == "torchtitan":
            per += 4 * a  # SDPA's saved output comes with its fp32 logsumexp
        return per * (2 if precision == "fp32" else 1)
    scores = 0 if shape.fused_attention else a * s
    kept_input = scores if shape.softmax_saves_input else 0  # torch < 1.11 (Shape.softmax_saves_input)
    if precision == "fp32":
        return 66 * h + 9 * scores + 4 * kept_input
    if precision == "amp":
        # the scores plus HF's fp32 additive mask promote to fp32: softmax's input is fp32 too
        return 42 * h + 7 * scores + 4 * kept_input
    return 34 * h + 5 * scores + 2 * kept_input


# Programs whose layers upcast RMSNorm to fp32, expand k/v and copy the projection's input
# (``upcast_norm_layer``), and whose loss sees fp32 logits.
UPCAST_NORM_PROGRAMS = ("litgpt", "hf-llama", "torchtune")


def upcast_norm_layer(shape: Shape) -> float:
    """Bytes a layer of LitGPT's GPT (litgpt/model.py at 101e31d2, 2024-05) or HF transformers'
    LlamaDecoderLayer (4.40, eager modules over SDPA) saves per token, 16-bit, read from the code:
    - each of the two RMSNorms 8h + 4: it upcasts (``x.float()``, 4h, saved by the square and the
      multiply), the rsqrt (4), the normed 16-bit tensor the weight multiplies (2h), and its output
      (2h, saved by the next linear) (litgpt model.py RMSNorm.forward; HF LlamaRMSNorm);
    - attention 10q + 4a (q = heads x head_dim): q after RoPE, k and v expanded from the kv heads to
      every query head and materialised (litgpt ``k.expand(...)`` then ``reshape``; HF ``repeat_kv``),
      the attention output SDPA saves with its fp32 logsumexp (4 bytes a head), and the output
      projection's input, a copy (``transpose(1, 2).reshape``, the kernel's output being laid out by
      head);
    - the gated MLP 8F: gate and up outputs, the activation (SiLU, or Gemma's tanh GELU) and the
      product the down projection saves.
    A CPU check with ``torch.autograd.graph.saved_tensors_hooks`` on a tiny LitGPT Block counted the
    same bytes (helper reading of 2026-11-27, in benchmarks/RESULTS.md)."""
    h, q, f = shape.hidden, shape.q_width, shape.mlp_width
    return 2 * (8 * h + 4) + 10 * q + 4 * shape.heads + 8 * f


def torchtune_layer(shape: Shape, packed: bool = False) -> float:
    """Bytes a layer of torchtune's TransformerSelfAttentionLayer (0.5.0.dev at 1814feb1, late 2024)
    saves per token, 16-bit, read from its code: the two RMSNorms as LitGPT's (8h + 4 each:
    torchtune/modules/rms_norm.py upcasts to fp32); attention 8q + 4a: q, k and v expanded to every
    query head (``expand().flatten(1, 2)`` copies, modules/attention.py), the attention output and its
    logsumexp; no copy before the output projection (from torch 2.5 the attention output has q's
    layout, so ``.contiguous()`` copies nothing); the gated MLP 8F; and, with packed sequences (each
    token's position passed in), the fp32 RoPE table rows gathered per token for q and for k
    (2 x 4 x head_dim, _position_embeddings.py)."""
    h, q, f = shape.hidden, shape.q_width, shape.mlp_width
    rope = 8 * (q // shape.heads) if packed else 0
    return 2 * (8 * h + 4) + 8 * q + 4 * shape.heads + 8 * f + rope


def terms(shape: Shape, run: Run) -> dict[str, float]:
    """Bytes of each term on the most loaded rank (the first pipeline stage, or the only one)."""
    layers_here = math.ceil(shape.layers / run.pp)
    params_here = _params_here(shape, run)
    out: dict[str, float] = {"states": _states(params_here, run)}
    if run.fresh_grads and run.strategy in ("ddp", "fsdp-full"):
        # the states less the gradients (16-bit in pure 16-bit training, else fp32), the rank's shard
        out["states"] -= (2 if run.pure16 else 4) * params_here / (run.dp if run.strategy == "fsdp-full" else 1)
    if run.no_sync_grads and run.strategy == "fsdp-full":
        # the whole unsharded gradient (in the parameters' dtype) in place of the rank's shard of it
        out["no_sync_grads"] = (2 if run.pure16 else 4) * params_here * (1 - 1 / run.dp)
    fabric_fsdp1 = run.fabric_fsdp1 and run.strategy == "fsdp-full" and run.dp > 1
    if fabric_fsdp1:
        root = (shape.embedding_params() + shape.hidden) / run.tp  # embedding, head and final norm
        head = shape.vocab * shape.hidden / run.tp  # the head's matrix (a table of its own: untied)
        grad_16 = 2 if run.pure16 else 4
        out["fsdp1_root_unit"] = 2 * root  # gathered: a buffer of its own beside the rank's shard
        out["fsdp1_head_grad"] = grad_16 * head
        out["fsdp1_root_grads"] = grad_16 * (root - head) + grad_16 * root  # the embedding's, then the join
    if run.kept_gathered_weights and run.strategy == "zero3":
        layers_kept = 1 if run.recompute == "full" else layers_here  # reentrant checkpointing: no grad
        head = shape.vocab * shape.hidden if shape.lm_head else 0  # the head's linear
        out["zero3_kept_weights"] = 2 * (layers_kept * shape.linear_params() + head) / run.tp
    if run.reduce_bucket:
        out["zero_reduce_bucket"] = run.reduce_bucket * _width(run)
    if run.precision == "amp":
        # fp32 weights and gradients and Adam's moments are the 16N; autocast also caches every
        # weight's 16-bit copy for the forward (2N).
        out["amp_weight_cache"] = 2 * params_here
    tokens = run.micro_batch * shape.seq / run.tp
    width = 4 if run.precision == "fp32" else 2
    whole_layer = saved_per_token(shape, run.precision, packed=run.packed) * tokens
    if run.recompute == "full":
        kept = layers_here * width * shape.hidden * tokens  # each layer's input
    elif run.recompute == "op":
        kept = layers_here * saved_per_token(shape, run.precision, "op") * tokens
    else:
        kept = layers_here * whole_layer
    out["activations"] = kept * run.pp  # 1F1B: the first stage holds pp micro-batches in flight
    if run.recompute in ("full", "op"):
        out["recomputed_layer"] = whole_layer  # one layer at a time, in the backward (``backward_peak``)
    if shape.program == "torchtitan":
        out.update(_torchtitan_terms(shape, run))
        return out
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
        per_logit = (2 + 4 + 2 * 4 / run.loss_chunks if run.loss_chunks
                     else LOGIT_BYTES_FP32 if run.precision == "fp32" or shape.program in UPCAST_NORM_PROGRAMS
                     else 2 + 2 + 2 + 2 if run.pure16 or run.half_logits else LOGIT_BYTES_16BIT)
        out["logits"] = tokens * shape.vocab * per_logit
        if run.loop_keeps_logits:
            out["loop_logits"] = tokens * shape.vocab * 4
            out["logits"] -= out["loop_logits"]
        if shape.program in UPCAST_NORM_PROGRAMS:
            # the final RMSNorm's saved tensors (8h + 4, as a layer's norm); LitGPT's logits reach the
            # loss as fp32 through Fabric's output conversion (lightning fabric wrappers.py
            # _FabricModule.forward, convert_output), HF Llama's through ``logits.float()`` and its
            # shifted copy, torchtune's through ``.float()`` (the recipe then deletes the fp32 logits,
            # and the loss's backward makes two fp32 gradients beside the saved log-softmax): 12
            # bytes an element.
            out["final_norm"] = (8 * shape.hidden + 4) * tokens
    if shape.program == "hf-llama" and run.recompute == "none":
        # HF Llama keeps use_cache=True in training unless checkpointing is on (modeling_llama.py 4.40
        # forces it off then): the DynamicCache holds every layer's k (after RoPE) and v, 16-bit.
        out["kv_cache"] = 2 * 2 * shape.kv_width * layers_here * tokens
    if run.strategy in ("fsdp-full", "zero3") and run.dp > 1:
        unit = shape.layer_params() / run.tp
        grad = 2 if run.pure16 else 4  # one unit's unsharded gradient before its reduce-scatter
        if fabric_fsdp1:  # the block's own gradients and their join, as the block's backward ends
            out["fsdp1_working_set"] = 2 * unit * 2 + 2 * unit * grad
        else:
            out["fsdp_working_set"] = 2 * unit * 2 + unit * grad  # two gathered 16-bit units + one gradient
    return out


def _torchtitan_terms(shape: Shape, run: Run) -> dict[str, float]:
    """What torchtitan (late 2024: f6a9daa, 2024-12-20; train.py, parallelize_llama.py) holds beside its
    layers' activations, read from its code (helper reading of 2026-11-27, RESULTS.md):
    - the final RMSNorm (fp32 upcast: 6h a token, sequence-sharded under tensor parallel) and the output
      projection's input (2h, all-gathered to the whole sequence under tensor parallel, and saved);
    - the loss's backward: ``cross_entropy(pred.float())`` after ``del pred`` (the 16-bit logits freed):
      the fp32 log-softmax, the nll gradient and the log-softmax gradient, 12 bytes an element; under
      loss_parallel (tp > 1) 16 bytes over the rank's V/tp columns (log-softmax, zeros_like, exp, sum);
    - FSDP2's gathered 16-bit parameters: the root (embedding, final norm, output head) stays gathered from
      the forward to the end of the backward, and the last block is not resharded after the forward."""
    h, tp = shape.hidden, run.tp
    tokens = run.micro_batch * shape.seq  # the data-parallel rank's micro-batch, the whole sequence
    out = {"final_norm": 6 * h * tokens / tp + 2 * h * tokens}
    if shape.lm_head and run.pp == 1:
        out["logits"] = tokens * shape.vocab / tp * (16 if tp > 1 else 12)
    if run.strategy == "fsdp-full" and run.dp > 1:
        out["fsdp2_gathered"] = 2 * (shape.embedding_params() + h) / tp + 2 * shape.layer_params() / tp
    return out


# The backward's three moments and the terms live in each (a term not named lives throughout): the
# loss's start (the logits and the loss's tensors); the last layer's backward, after the output head's
# backward has freed those (the layer recomputed under activation recompute, Fabric FSDP1's gathered
# block and its gradients); the backward's end, every activation freed (Fabric FSDP1's root gradients).
BACKWARD_MOMENTS = ("loss", "layer", "end")
TERM_MOMENTS: dict[str, tuple[str, ...]] = {
    "logits": ("loss",), "final_norm": ("loss",),
    "recomputed_layer": ("layer",), "fsdp1_working_set": ("layer",),
    "activations": ("loss", "layer"), "zero3_kept_weights": ("loss", "layer"),
    "tp_gathered_inputs": ("loss", "layer"),
    "fsdp1_head_grad": ("layer", "end"), "fsdp1_root_grads": ("end",),
}


def backward_peak(parts: dict[str, float]) -> float:
    """The backward's peak: the largest of its moments' sums (``TERM_MOMENTS``)."""
    return max(sum(v for k, v in parts.items() if moment in TERM_MOMENTS.get(k, BACKWARD_MOMENTS))
               for moment in BACKWARD_MOMENTS)


def step_terms(shape: Shape, run: Run, sub_group_size: float = zero_step.DS_SUB_GROUP_SIZE,
               foreach_optimizer: bool = True) -> dict[str, float]:
    """The run's other phase, its optimizer step: for DeepSpeed ZeRO the sharded states and the fp32
    gradients (and optimizer temporaries) of ``zero_step``; for other strategies with a foreach torch
    AdamW (``Run.foreach_step``) the states and its one parameter-sized temporary (the rank's shard
    under FSDP); else empty. The run's peak is the larger of this and :func:`terms`, which is the
    backward's start."""
    params_here = _params_here(shape, run)
    if run.strategy not in ("zero1", "zero2", "zero3"):
        if not run.foreach_step:
            return {}
        shard = params_here / (run.dp if run.strategy == "fsdp-full" else 1)
        return {"states": _states(params_here, run), "foreach_step": (2 if run.pure16 else 4) * shard}
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
