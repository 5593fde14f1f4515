"""Step time and per-device memory of GPT training in a layout on a machine (see the package doc)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from orchestrator.predict.perfmodel.layout import Layout
from orchestrator.predict.perfmodel.machine import Machine

BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's bucket_cap_mb default: the all-reduce left after backward
# DeepSpeed ZeRO defaults (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig): parameters
# prefetched ahead of use, in elements (stage3_prefetch_bucket_size 5e7); overlap_comm defaults
# to True for stage 3 only (validator overlap_comm_valid: ``stage == ZeroStageEnum.weights``), so
# stages 1 and 2 reduce their gradients after the backward, not under it.
DS_PREFETCH_ELEMENTS = 5e7
# ZeRO-3 fetches parameters per submodule as its hooks fire (partitioned_param_coordinator.py):
# a GPT layer's four Linear and two LayerNorm modules, one all-gather each.
DS_FETCHES_PER_LAYER = 6
# What sharding costs beside the collectives' bytes, which one device pays too (issue 50: on one
# H200, gpt2-medium's step took 40-57 ms more under FSDP2 and 63-82 ms more under ZeRO-2 than under
# DDP, where the model predicted no difference). Per FSDP unit (a block, and the root) and per
# all-gather or reduce-scatter call: FSDP2's copy-in/copy-out, its stream waits and hooks.
# Per parameter tensor and gradient reduction under DeepSpeed ZeRO-1/2: its per-parameter backward
# hook, the copy into the reduction bucket and the partition's bookkeeping. Fitted by
# benchmarks/sharding_cost.py on the 2026-11-27 H200 rows (gpt2-medium, with and without
# checkpointing) alone; the 2026-11-28 rows check them (the same shapes: a repeat, not a held-out
# source), and gpt2-xl under every strategy is predicted before it runs (benchmarks/RESULTS.md).
# ZeRO-3's fetch per submodule has no one-device measurement: it takes FSDP's call cost as its prior.
FSDP_CALL_S = 0.00063
DS_PARAM_S = 0.00028


@dataclass(frozen=True)
class ModelShape:
    """A decoder of L layers of hidden h with a heads, vocabulary V, sequence s.

    The defaults are a GPT (GPT-2: biases, a 4h GeLU MLP, every head with its own keys and values,
    the output head tied to the embedding). A Llama-style layer sets ``ffn`` (the MLP's inner width),
    ``kv_heads`` (grouped-query attention: fewer key/value heads than query heads), ``gated``
    (SwiGLU: three MLP matrices, RMSNorm, no biases) and ``tied=False`` (its own output head), and
    ``positions=0`` (rotary: no position table)."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    fused_attention: bool = True  # sdpa/flash: no s x s scores in memory
    positions: int = 1024
    ffn: int = 0  # the MLP's inner width; 0: 4h
    kv_heads: int = 0  # key/value heads; 0: as many as query heads
    gated: bool = False  # SwiGLU (gate and up projections, then down) instead of one GeLU matrix pair
    tied: bool = True  # the output head shares the token embedding's matrix

    @property
    def mlp_width(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values): kv heads x head dimension (h without GQA)."""
        return (self.kv_heads or self.heads) * (self.hidden // self.heads)

    @property
    def layer_params(self) -> int:
        h, f, kv = self.hidden, self.mlp_width, self.kv_width
        if self.gated:  # q, o; k, v; gate, up, down; two RMSNorm scales
            return 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
        # GPT-2 (workloads/flops.transformer_layer_params, 12h^2 + 13h at the defaults): q, k, v, o
        # and the two MLP matrices with their biases, two LayerNorms (scale and shift)
        return 2 * h * h + 2 * h * kv + 2 * h * f + (h + 2 * kv) + h + f + h + 4 * h

    @property
    def layer_tensors(self) -> int:
        """Parameter tensors of one layer: GPT-2's twelve (q/k/v, o, two MLP matrices, each with its
        bias, two LayerNorms' scale and shift); a Llama layer's nine (q, k, v, o, gate, up, down, two norms)."""
        return 9 if self.gated else 12

    @property
    def embedding_params(self) -> int:
        """The token embedding, and the output head where it is not tied to it."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def params(self) -> int:
        """N of 6N + 12Lhs: the layers, the token embedding (and an untied head), the final norm; no positions."""
        return self.layers * self.layer_params + self.embedding_params + 2 * self.hidden

    def model_flops_per_token(self) -> float:
        """6N + 12*L*h*s (forward + backward; attention over the full square, not halved)."""
        return 6 * self.params + 12 * self.layers * self.hidden * self.seq_len


@dataclass
class StepTime:
    """One layout's predicted step, in seconds by part."""

    step_s: float
    compute_s: float  # compute of the critical path (the slowest stage, all micro-batches)
    tp_comm_s: float
    cp_comm_s: float
    pp_comm_s: float
    bubble_s: float
    dp_comm_exposed_s: float
    optimizer_s: float
    overhead_s: float  # the fixed cost per step (efficiency.step_overhead_ms)
    micro_batches: int
    micro_batch: int  # sequences per micro-batch, after capping at the replica's share
    global_batch: int  # sequences per step, all replicas


@dataclass
class Estimate(StepTime):
    """One layout's predicted step and memory: times in seconds, memory in GB per device (the fullest stage)."""

    layout: Layout
    tokens_per_s: float
    mfu: float | None
    memory_gb: float
    fits: bool
    model_flops: float  # per step, all devices
    memory_parts: dict[str, float] = field(default_factory=dict)  # GB per device by part
    # What memory_gb came from: this module's formula (_memory), or the run's own memory model
    # (orchestrator/predict/run_memory.py: trace, trace+model, formula) where `orch predict` asked it.
    memory_from: str = "perfmodel"


def _op(machine: Machine, flops: float, nbytes: float, peak_flops: float) -> float:
    """Roofline time of one op plus its launch cost."""
    eff = machine.efficiency
    compute = flops / (peak_flops * eff.matmul) if flops else 0.0
    memory = nbytes / (machine.bandwidth_gbs * 1e9 * eff.memory)
    return max(compute, memory) + eff.op_overhead_us * 1e-6


def _ring(machine: Machine, nbytes: float, ranks: int, span: int, factor: float) -> float:
    """A ring collective over ``ranks``: ``factor`` (n-1)/n x bytes / bandwidth + latency per hop
    (factor 2 for all-reduce, 1 for all-gather or reduce-scatter)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    bw = machine.link_gbs(span, ranks) * 1e9 * machine.efficiency.network
    return factor * (ranks - 1) / ranks * nbytes / bw + factor * (ranks - 1) * machine.latency_us * 1e-6


def _p2p(machine: Machine, nbytes: float, span: int) -> float:
    return nbytes / (machine.link_gbs(span, 2) * 1e9 * machine.efficiency.network) + machine.latency_us * 1e-6


def _grid(tp: int) -> tuple[int, int]:
    """The r x c grid of 2D tensor parallel: r the largest divisor of tp at most sqrt(tp)."""
    r = max(d for d in range(1, int(math.isqrt(tp)) + 1) if tp % d == 0)
    return r, tp // r


def _layer_forward(shape: ModelShape, layout: Layout, machine: Machine, tokens: float, mb: int,
                   act: int, peak: float, gemm_peak: float) -> tuple[float, float]:
    """(all ops, of which attention) forward seconds of one layer for one micro-batch on one device.

    ``tokens``: this device's query tokens (mb x s / cp); keys and values span the whole sequence.
    ``gemm_peak``: the peak of the layer's linear GEMMs (``peak`` but in fp8 runs).
    """
    h, t, s = shape.hidden, layout.tp, shape.seq_len
    heads_local = math.ceil(shape.heads / t)  # padded heads where tp does not divide them
    hd = h // shape.heads
    ht = h / t  # this rank's slice of a hidden vector
    # Element-wise work split by tp too: Megatron's sequence parallel (1D) or the 2D grid.
    elem = tokens * h / t

    def gemm(m: float, k: float, n: float) -> float:
        return _op(machine, 2 * m * k * n, (m * k + k * n + m * n) * act, gemm_peak)

    def elementwise(n: float, passes: int = 2) -> float:
        return _op(machine, 0.0, n * act * passes, peak)

    ft, kvt = shape.mlp_width / t, shape.kv_width / t  # this rank's slice of the MLP and of K (and V)
    time = elementwise(elem) + elementwise(elem)  # LayerNorm 1 and 2 (read, write)
    time += gemm(tokens, h, ht + 2 * kvt) + gemm(tokens, ht, h)  # q, k, v; attention's output
    if shape.gated:  # SwiGLU: gate and up in one pass, SiLU x up (2 reads, 1 write), down
        time += gemm(tokens, h, 2 * ft) + elementwise(tokens * ft, 3) + gemm(tokens, ft, h)
    else:  # GeLU between the two matrices
        time += gemm(tokens, h, ft) + elementwise(tokens * ft) + gemm(tokens, ft, h)
    time += 2 * elementwise(elem, 3)  # two residual adds (2 reads, 1 write)
    # Attention: Q K^T and scores x V over the full square (4 x tokens x s x h / t FLOPs); each
    # query token meets the s keys of its own sequence (all of them under context parallel).
    attn_flops = 4 * tokens * s * heads_local * hd
    kv_local = math.ceil((shape.kv_heads or shape.heads) / t)  # grouped-query attention: fewer K, V heads
    qkvo = (2 * tokens * heads_local + 2 * mb * s * kv_local) * hd * act
    if shape.fused_attention:
        attention = _op(machine, attn_flops, qkvo, peak)
    else:  # the scores written by Q K^T, softmaxed (read + write), read again by scores x V
        scores = tokens * s * heads_local  # elements
        attention = (_op(machine, attn_flops / 2, qkvo / 2 + scores * act, peak) + elementwise(scores)
                     + _op(machine, attn_flops / 2, qkvo / 2 + scores * act, peak))
    return time + attention, attention


def _tp_comm(shape: ModelShape, layout: Layout, machine: Machine, tokens: float, act: int) -> float:
    """Tensor-parallel collectives of one layer's forward for one micro-batch (not overlapped)."""
    t = layout.tp
    if t <= 1:
        return 0.0
    block = tokens * shape.hidden * act  # one activation tensor of the layer (this device's tokens)
    if not layout.tp2d:
        # Megatron 1D with sequence parallel: all-gather + reduce-scatter around attention and
        # MLP, the volume of two all-reduces; the group is tp consecutive devices.
        return 2 * _ring(machine, block, t, t, 2.0)
    r, c = _grid(t)
    # 2D (SUMMA-like): per block (attention, MLP) all-gather the input across a column of r
    # and reduce-scatter the output across a row of c, each of a 1/c or 1/r slice.
    per_block = _ring(machine, block / c, r, t, 1.0) + _ring(machine, block / r, c, c, 1.0)
    return 2 * per_block


def _memory(shape: ModelShape, layout: Layout, machine: Machine, precision: str, mb: int,
            micro_batches: int) -> dict[str, float]:
    """Bytes per device of the fullest pipeline stage, by part (perf-model.md's formulas)."""
    from orchestrator.predict.memory import LOGIT_BYTES, model_state_bytes

    t, p = layout.tp, layout.pp
    h, s_local = shape.hidden, shape.seq_len / layout.cp
    layers = math.ceil(shape.layers / p)
    n_local = (layers * shape.layer_params + shape.embedding_params + shape.positions * h) / t
    states = model_state_bytes(int(n_local), layout.strategy, layout.dp, precision)
    if layout.strategy == "ddp" and layout.dp > 1:
        states += 4 * n_local  # DDP's gradient buckets: one more fp32 copy of the gradients
    if layout.zero == 3:
        states += 2 * 2 * shape.layer_params / t  # gathered 16-bit parameters of two layers (prefetch)
    scale = 2 if BYTES.get(precision, 4) == 4 else 1  # Korthikanti counts 16-bit activations
    per_layer = s_local * mb * h * 34 / t * scale
    scores = 5 * shape.heads * s_local * shape.seq_len * mb / t * scale if not shape.fused_attention else 0.0
    in_flight = min(micro_batches, p)  # 1F1B: the first stage holds p micro-batches
    if layout.recompute:
        activations = layers * in_flight * 2 * s_local * mb * h / t * scale + per_layer + scores
    else:
        activations = layers * in_flight * (per_layer + scores)
    # The head is a bf16 GEMM in an fp8 run (memory.LOGIT_BYTES); fp8 activations are counted 16-bit.
    logits = mb * s_local * shape.vocab / t * (LOGIT_BYTES.get(precision, 4) + 8)
    return {"model_states": states / 1e9, "activations": activations / 1e9, "logits": logits / 1e9,
            "fixed": machine.fixed_memory_gb}


def _step_time(shape: ModelShape, layout: Layout, machine: Machine, precision: str, batch_size: int,
              micro_batch: int | None, global_batch: int | None) -> StepTime:
    """The step of ``layout`` (see :func:`estimate`), without the memory model."""
    machine = machine.for_precision(precision)
    devices = layout.devices
    global_batch = global_batch or batch_size * devices
    mb = micro_batch or batch_size
    per_replica = max(1, global_batch // layout.dp)
    m = max(1, math.ceil(per_replica / mb))
    mb = min(mb, per_replica)
    act = BYTES.get(precision, 4)
    peak = machine.peak(precision) * 1e12
    gemm_peak = peak
    if precision == "fp8":
        # fp8 training as Transformer Engine and torchao's float8 run it: the layers' linear GEMMs
        # in fp8 (at the fp8 peak, inputs cast per GEMM), everything else (attention's products,
        # the LM head, element-wise work, activations kept for the backward, gradients) in bf16.
        # The run's matmul efficiency is the (device model, fp8) one (machine.MATMUL_EFFICIENCY).
        act = BYTES["bf16"]
        peak = machine.peak("bf16") * 1e12
        gemm_peak = machine.peak("fp8") * 1e12 if "fp8" in machine.peak_tflops else peak
    tokens = mb * shape.seq_len / layout.cp
    t, p, cp, d = layout.tp, layout.pp, layout.cp, layout.dp

    fwd, _ = _layer_forward(shape, layout, machine, tokens, mb, act, peak, gemm_peak)
    passes = 4.0 if layout.recompute else 3.0  # forward + backward (2x) [+ recomputed forward]
    tp_comm = _tp_comm(shape, layout, machine, tokens, act) * (passes - 1.0)  # fwd, bwd (x2 volume), recompute
    # Context parallel as the gpt2 workload runs it (workloads/context.py): K and V of the whole
    # sequence all-gathered in every forward (the recomputed one too) and their gradients
    # all-reduced in the backward, before the attention that needs them: not overlapped.
    cp_comm = 0.0
    if cp > 1:
        kv = 2 * mb * shape.seq_len * shape.kv_width / t * act
        forwards = passes - 2.0  # 1, or 2 with recompute
        cp_comm = forwards * _ring(machine, kv, cp, t * cp, 1.0) + _ring(machine, kv, cp, t * cp, 2.0)
    layers = math.ceil(shape.layers / p)
    layer_time = fwd * passes + tp_comm + cp_comm
    # The LM head (logits GEMM + softmax/cross-entropy) on the last stage; the embedding look-up on the first.
    head_fwd = _op(machine, 2 * tokens * shape.hidden * shape.vocab / t,
                   (tokens * shape.hidden + shape.hidden * shape.vocab / t + 3 * tokens * shape.vocab / t) * act, peak)
    head = 3 * head_fwd + _op(machine, 0.0, 2 * tokens * shape.vocab / t * 4, peak)
    stage = layers * layer_time + head
    pp_comm = 0.0
    if p > 1:  # activations forward and their gradients backward across each stage boundary
        pp_comm = 2 * layout.vp * _p2p(machine, tokens * shape.hidden / t * act, 2 * t * cp * d)
        stage += pp_comm
    bubble = (p - 1) / max(layout.vp, 1) * stage
    pipeline = m * stage + bubble

    # Data parallel: gradients of the local shard (fp32 under torch autocast and in fp32;
    # 16-bit reduced by DeepSpeed ZeRO in 16-bit precisions).
    n_local = (layers * shape.layer_params + shape.embedding_params) / t
    grad_bytes = 2 if (layout.strategy.startswith("zero") and act == 2) else 4
    span = t * cp * d  # a data-parallel ring spans its tp x cp x dp consecutive devices
    dp_exposed = 0.0
    if d > 1:
        reduce = _ring(machine, n_local * grad_bytes, d, span, 2.0)
        backward_window = layers * fwd * (passes - 1.0)  # the last micro-batch's backward
        if not layout.grad_overlap:
            backward_window = 0.0  # reduced after the backward (Layout.grad_overlap)
        bucket = _ring(machine, min(DDP_BUCKET_BYTES, n_local * grad_bytes), d, span, 2.0)
        deepspeed = layout.strategy.startswith("zero")  # DeepSpeed's ZeRO, not torch FSDP
        if layout.zero == 3 and deepspeed:
            # DeepSpeed ZeRO-3 (issue 25: measured 1.3-3.2x slower than FSDP): each layer's
            # parameters all-gathered in the forward and again in the backward of every
            # micro-batch; only DS_PREFETCH_ELEMENTS of them are fetched ahead, under the
            # previous layer's compute, the rest waits. Gradients reduce-scattered in every
            # micro-batch's backward (partitioned gradients), overlapped (overlap_comm) but for
            # the last bucket.
            # Gathered in the forward, in the backward, and again in the recomputed forward
            # (hooks fire on every module call), each fetch paying the ring's latency.
            fetches = passes - 1.0
            gather = _ring(machine, n_local * act, d, span, 1.0) * fetches
            gather += fetches * layers * (DS_FETCHES_PER_LAYER - 1) * (d - 1) * machine.latency_us * 1e-6
            per_layer = gather / max(layers, 1)
            ahead = min(1.0, DS_PREFETCH_ELEMENTS / max(shape.layer_params / t, 1.0))
            layer_compute = fwd * passes
            per_micro = layers * ((1 - ahead) * per_layer + max(0.0, ahead * per_layer - layer_compute))
            dp_exposed = m * (per_micro + max(bucket, reduce / 2 - backward_window))
        elif layout.zero == 3:
            # Reduce-scatter of gradients (half the all-reduce) after the last backward, and the
            # parameter all-gathers (forward and backward) of every micro-batch, prefetched
            # under its compute but for one layer's.
            gather = _ring(machine, n_local * act, d, span, 1.0) * 2
            hidden_under = layers * fwd * passes
            per_micro = max(gather / max(layers, 1), gather - hidden_under)
            dp_exposed = m * per_micro + max(bucket, reduce / 2 - backward_window)
        elif layout.zero in (1, 2) and deepspeed:
            # DeepSpeed ZeRO-1/2 without overlap_comm (its default below stage 3): the gradient
            # reduce-scatter runs after the backward (ZeRO-2 after every micro-batch's, as its
            # gradients are partitioned; ZeRO-1 at the accumulation boundary), then the
            # all-gather of the updated parameters.
            dp_exposed = (m if layout.zero == 2 else 1) * reduce / 2 + reduce / 2
        elif layout.zero in (1, 2):
            # Reduce-scatter under the backward as DDP's all-reduce; the all-gather of the
            # updated parameters after the optimizer step is exposed.
            dp_exposed = max(bucket, reduce / 2 - backward_window) + reduce / 2
        else:
            dp_exposed = max(bucket, reduce - backward_window)
    dp_exposed += _sharding_host(shape, layout, machine, layers, m, n_local, act, passes)
    # Optimizer (AdamW): a pass over fp32 parameters (r/w), gradients (r), two moments (r/w).
    shard = n_local / (d if layout.zero >= 1 else 1)
    optimizer = _op(machine, 0.0, shard * (8 + 4 + 16), peak) + 6 * machine.efficiency.op_overhead_us * 1e-6
    overhead = machine.efficiency.step_overhead_ms * 1e-3
    pp_total = (m + (p - 1) / max(layout.vp, 1)) * pp_comm
    return StepTime(step_s=pipeline + dp_exposed + optimizer + overhead, compute_s=m * layers * fwd * passes + m * head,
                     tp_comm_s=m * layers * tp_comm, cp_comm_s=m * layers * cp_comm, pp_comm_s=pp_total,
                     bubble_s=bubble, dp_comm_exposed_s=dp_exposed, optimizer_s=optimizer, overhead_s=overhead,
                     micro_batches=m, micro_batch=mb, global_batch=global_batch)


def _sharding_host(shape: ModelShape, layout: Layout, machine: Machine, layers: int, m: int, n_local: float,
                   act: int, passes: float) -> float:
    """What a sharded strategy costs beyond its collectives' bytes, on any number of devices
    (:data:`FSDP_CALL_S`, :data:`DS_PARAM_S`): calls and copies that one device pays too.

    FSDP2 (fsdp-full: each unit gathered in the forward and again in the backward of every
    micro-batch; fsdp-grad-op: once per micro-batch, kept through its backward) and its one
    reduce-scatter per unit at the accumulation boundary; each gather copies the unit's fp32 shard
    into a 16-bit buffer and out into the parameters (4 + 3 x act bytes a parameter), each
    reduce-scatter the gradients in and, in fp32, out (3 x act + 8). DeepSpeed ZeRO-1/2: a cost per
    parameter tensor per reduction (ZeRO-2 every micro-batch, ZeRO-1 once). ZeRO-3: a call per
    submodule fetch (forward, backward and the recomputed forward)."""
    if layout.zero == 0:
        return 0.0
    units = layers + 1  # every block, and the root (embeddings, final norm, head)
    deepspeed = layout.strategy.startswith("zero")
    if not deepspeed:
        gathers = units * m * (2 if layout.zero == 3 else 1)
        copies = gathers * (4 + 3 * act) * n_local / units + (3 * act + 8) * n_local
        return (gathers + units) * FSDP_CALL_S + _op(machine, 0.0, copies, 1.0)
    if layout.zero == 3:
        return m * (passes - 1.0) * layers * DS_FETCHES_PER_LAYER * FSDP_CALL_S
    tensors = layers * shape.layer_tensors + 4  # the token and position embeddings, the final norm's two
    return tensors * (m if layout.zero == 2 else 1) * DS_PARAM_S


def step_seconds(shape: ModelShape, layout: Layout, machine: Machine, *, precision: str, batch_size: int,
                 micro_batch: int | None = None, global_batch: int | None = None) -> float:
    """``estimate(...).step_s`` alone (what ``orch plan`` asks of every run), without the memory model."""
    return _step_time(shape, layout, machine, precision, batch_size, micro_batch, global_batch).step_s


def estimate(shape: ModelShape, layout: Layout, machine: Machine, *, precision: str, batch_size: int,
             micro_batch: int | None = None, global_batch: int | None = None) -> Estimate:
    """Predicted step of ``layout``: the global batch is ``batch_size`` x devices sequences
    (or ``global_batch``); each model replica (dp of them) runs its share in micro-batches of
    ``micro_batch`` (default ``batch_size``) sequences: gradient accumulation, or the pipeline's m."""
    timed = _step_time(shape, layout, machine, precision, batch_size, micro_batch, global_batch)
    step = timed.step_s
    tokens_step = timed.global_batch * shape.seq_len
    model_flops = shape.model_flops_per_token() * tokens_step
    parts = _memory(shape, layout, machine, precision, timed.micro_batch, timed.micro_batches)
    memory_gb = sum(parts.values())
    fits = machine.memory_gb is None or memory_gb <= machine.memory_gb
    peak = machine.peak(precision) * 1e12
    mfu = model_flops / step / (layout.devices * peak) if step > 0 else None
    return Estimate(**vars(timed), layout=layout,
                    tokens_per_s=tokens_step / step, mfu=mfu, memory_gb=memory_gb, fits=fits,
                    model_flops=model_flops, memory_parts=parts)


BREAKDOWN = ("compute", "tensor_parallel", "context_parallel", "pipeline_parallel", "bubble", "data_parallel",
             "optimizer", "overhead")


def breakdown(e: Estimate) -> dict[str, float]:
    """The step's seconds by part (:data:`BREAKDOWN`), summing to ``e.step_s``.

    ``pp_comm_s`` counts the stage-boundary sends of the bubble's (p - 1)/vp stage times too, and
    ``bubble_s`` is those stage times whole (sends included); so that no second is counted twice,
    pipeline_parallel here is the sends of the m micro-batches alone, the rest staying in the bubble.
    """
    lay = e.layout
    in_flight = e.micro_batches + (lay.pp - 1) / max(lay.vp, 1)
    return {"compute": e.compute_s, "tensor_parallel": e.tp_comm_s, "context_parallel": e.cp_comm_s,
            "pipeline_parallel": e.pp_comm_s * e.micro_batches / in_flight, "bubble": e.bubble_s,
            "data_parallel": e.dp_comm_exposed_s, "optimizer": e.optimizer_s, "overhead": e.overhead_s}


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """1F1B's idle fraction of a step: (p - 1) / (m + p - 1)."""
    return (pp - 1) / (micro_batches + pp - 1)
