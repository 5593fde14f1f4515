"""Per-rank peak memory of a gpt2 training run, from the program itself (issue 11, study E).

Why: the formulas of ``workloads/memory.py`` leave out what a real step allocates (DDP's
gradient buckets, autocast's 16-bit weight copies, the optimizer's temporaries, FSDP's
gathered blocks, the loss's fp32 logits) and came out 30-43% low against published
peaks. Here the workload's own model and training step run instead: the same
``strategies.build`` (ddp, fsdp-full, fsdp-grad-op) and ``Trainer.step`` (forward, loss,
backward, optimizer step, under autocast) as ``workloads/gpt2.py``, on fake tensors
(``FakeTensorMode``: shapes and dtypes, no storage) with a fake process group
(``FakeStore`` + backend "fake": DDP and FSDP wrap for rank 0 of N without N processes),
while :class:`LiveBytes` follows every tensor storage the step creates and frees.

What is counted, in the real run and here alike (:class:`LiveBytes`): the peak of live
tensor storage bytes from the model's construction to the end of the steps, the figure
CUDA's ``max_memory_allocated`` reports without the caching allocator's rounding to
512-byte blocks. Not counted: the device's fixed cost (CUDA context, allocator
fragmentation, NCCL buffers: the site profile's ``device.fixed_memory_gb`` adds it in
the orchestrator) and storage made outside torch's dispatcher (DeepSpeed's C++ buffers).

The optimizer's states are made first (one AdamW step on zero gradients), then one training
step is traced: the steady step, as the real run's second and later ones. Models deeper
than 4 layers are traced at 2 and 3 layers and extrapolated linearly in the layers (each
block allocates alike), so a 100-layer model costs what a 6-layer one does; a DDP rank
holds the same on 2 ranks as on more, so more are traced as 2; FSDP on more than 4
ranks is extrapolated from 2 and 4 (:func:`_by_ranks`). The trace runs on the CPU's autocast op lists and torch's
foreach AdamW (a CUDA run uses the fused AdamW, without the foreach temporaries): on a
GPU the prediction errs on the high side by at most those temporaries. fp16 is traced
as bf16 (same bytes; the GradScaler's ``.item()`` cannot run on fake tensors).

Activation checkpointing is traced like the rest (it is the model's own, ``GPTConfig.checkpointing``).
Tensor and pipeline layouts (``tp``/``pp`` > 1, ``workloads/parallel.py``) are not traced: their
DTensor sharding and pipeline schedule need a real group of tp x pp ranks, so
``memory.program_bytes`` returns None for them and the formula (``memory.gpt_training``, which
divides states and activations as the layout does) answers.

DeepSpeed ZeRO 1-3 cannot run on fake tensors (its engine reads values and allocates in
C++): :func:`deepspeed_bytes` is an analytic model over the traced forward/backward of
the same model in DeepSpeed's precision, stated and calibrated there.

A prediction is cached in this process and on disk (``$ORCH_MEMORY_CACHE`` or
``~/.cache/orch/memory``), keyed by a hash of the inputs, the workload code it runs and
torch's version (``workloads/memory.py``, which reads the cache without importing torch):
a plan of hundreds of runs traces each model shape once.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
import weakref
from dataclasses import replace
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from workloads import memory
from workloads.memory import DEEPSPEED, TRACED, Inputs



# ------------------------------------------------------------------ tracking live bytes

def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages behind a tensor (a wrapper subclass such as DTensor: its inner tensors')."""
    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()  # type: ignore[attr-defined]
        inner = (getattr(t, name) for name in names)
        return [st for x in inner if isinstance(x, torch.Tensor) for st in _storages(x)]
    try:
        return [t.untyped_storage()]
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
        return []


class LiveBytes(TorchDispatchMode):
    """Peak of the bytes of live tensor storages, followed op by op.

    Every op's outputs are looked at; a storage seen for the first time adds its bytes,
    a storage's death (weak reference) takes them away, and ``UntypedStorage.resize_``
    (FSDP2 frees and re-allocates its gathered parameters that way, outside the
    dispatcher) is patched while tracking to follow the change. Tensors that exist
    before tracking starts are counted only when passed to :meth:`track`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._orig_resize = torch.UntypedStorage.resize_

    def _free(self, ref: list[int]) -> None:
        self.live -= ref[0]

    def _add(self, st: torch.UntypedStorage) -> None:
        if st in self._sizes:
            return
        size = [st.nbytes()]
        self._sizes[st] = size
        weakref.finalize(st, self._free, size)
        self.live += size[0]
        if self.live > self.peak:
            self.peak = self.live

    def track(self, *tensors: Any) -> None:
        for t in tree_flatten(tensors)[0]:
            if isinstance(t, torch.Tensor):
                for st in _storages(t):
                    self._add(st)

    def reset_peak(self) -> None:
        self.peak = self.live

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.track(out)
        return out

    def __enter__(self) -> "LiveBytes":
        tracker = self
        orig = self._orig_resize

        def resize_(st: torch.UntypedStorage, size: int) -> Any:
            result = orig(st, size)
            known = tracker._sizes.get(st)
            if known is not None and known[0] != st.nbytes():
                tracker.live += st.nbytes() - known[0]
                known[0] = st.nbytes()
                tracker.peak = max(tracker.peak, tracker.live)
            return result

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        torch.UntypedStorage.resize_ = self._orig_resize  # type: ignore[method-assign]


# ------------------------------------------------------------------ the run's model

class _Session:
    """What ``strategies.build`` and ``TorchTrainer`` ask of a session, for rank 0 of N."""

    def __init__(self, precision: str, world_size: int) -> None:
        from workloads.harness import precision as precisions
        from workloads.harness.device import Device

        self.device = Device("cpu", torch.device("cpu"), "traced", 1)
        # fp16 traces as bf16: the same bytes, and no GradScaler (its .item() needs values).
        self.precision = precisions.resolve("bf16" if precision == "fp16" else precision, self.device,
                                            training=True)
        self.world_size = world_size
        self.rank = 0

    def ensure_process_group(self) -> str:
        return "fake"


@contextlib.contextmanager
def _fake_group(world_size: int) -> Iterator[None]:
    """A process group of ``world_size`` ranks in which this process is rank 0 (collectives do nothing)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a process group exists already: memory is traced in a process of its own")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _patched(world_size: int) -> Iterator[None]:
    """What reads values at start-up, which fake tensors lack, left out or made beforehand:
    DDP's parameter-shape check and broadcast (what they allocate is freed before the first
    step), and FSDP's default device mesh (made here on real tensors, then reused)."""
    import torch.nn.parallel.distributed as ddp_module
    from torch.distributed.fsdp._fully_shard import _fully_shard

    mesh = None
    if world_size and torch.distributed.is_initialized():
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world_size,))
    saved = (ddp_module._verify_param_shape_across_processes, ddp_module._sync_module_states,
             _fully_shard._init_default_mesh)
    ddp_module._verify_param_shape_across_processes = lambda *a, **k: None  # type: ignore[assignment]
    ddp_module._sync_module_states = lambda *a, **k: None  # type: ignore[assignment]
    if mesh is not None:
        _fully_shard._init_default_mesh = lambda *a, **k: mesh  # type: ignore[assignment]
    try:
        yield
    finally:
        (ddp_module._verify_param_shape_across_processes, ddp_module._sync_module_states,
         _fully_shard._init_default_mesh) = saved


def _in_place_all_reduce(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects string annotations
    """DDP's all-reduce as the fake group gives it: the bucket, reduced in place (no copy)."""
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


class _NoRebuild:
    """DDP's reducer, but for the re-bucketing after the first step: it broadcasts the new
    order's indices and reads them (no values on fake tensors); the buckets it makes hold
    the same bytes as the first ones."""

    def __init__(self, reducer: Any) -> None:
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)


def _batches(x_shape: tuple[int, int], accum: int, pool: int = 4) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
    """``Synthetic.batches``' pool of token tensors and its (input, target) views."""
    b, s = x_shape
    tokens = [torch.zeros((b, s + 1), dtype=torch.long) for _ in range(pool)]
    i = 0
    while True:
        micro = []
        for _ in range(accum):
            t = tokens[i % pool]
            i += 1
            micro.append((t[:, :-1], t[:, 1:]))
        yield micro


def measure_step(inputs: Inputs) -> int:
    """Peak live bytes of the strategies' own trainer on fake tensors: the optimizer's states made
    first (one AdamW step on zero gradients, as the real first step leaves them), then one
    training step, the steady one (the real run's second and later steps)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from workloads import strategies

    if inputs.strategy not in TRACED:
        raise ValueError(f"{inputs.strategy} is not traced (traced: {', '.join(TRACED)})")
    session = _Session(inputs.precision, inputs.devices)
    needs_group = inputs.strategy != "ddp" or inputs.devices > 1
    group = _fake_group(inputs.devices) if needs_group else contextlib.nullcontext()
    with group, _patched(inputs.devices if needs_group else 0):
        with FakeTensorMode(allow_non_fake_inputs=True), LiveBytes() as tracker:
            trainer = strategies.build(session, inputs.strategy, inputs.cfg, lr=1e-4,  # type: ignore[arg-type]
                                       batch=inputs.batch, accum=inputs.accum)
            if isinstance(trainer.model, torch.nn.parallel.DistributedDataParallel):
                trainer.model.register_comm_hook(None, _in_place_all_reduce)
                trainer.model.reducer = _NoRebuild(trainer.model.reducer)
            opt = trainer.opt  # type: ignore[attr-defined]
            for param in trainer.model.parameters():
                param.grad = torch.zeros_like(param)
            opt.step()
            opt.zero_grad(set_to_none=True)
            trainer.step(next(_batches((inputs.batch, inputs.seq), inputs.accum)))
            del trainer, opt
        return tracker.peak


# Models deeper than this are traced at 2 and 3 layers and extrapolated linearly in the number
# of layers (every block allocates the same, and a 48-layer step is tens of thousands of traced
# ops at ~0.1 ms each): exact where the peak falls in the same phase at 3 layers as at L. From
# 2 layers on it does (ddp, fsdp-full, fsdp-grad-op on 1, 2, 4 ranks, gpt2, gpt2-medium,
# gpt2-xl, fp16 and fp32: the 2-3 slope equals the 2-4 one to the byte); from 1 it does not
# (FSDP's peak moves).
EXTRAPOLATE_ABOVE = 4


def _by_layers(inputs: Inputs, trace: Callable[[Inputs], int]) -> int:
    layers = inputs.cfg.n_layer
    if layers <= EXTRAPOLATE_ABOVE:
        return trace(inputs)
    two = trace(replace(inputs, cfg=inputs.cfg.with_(n_layer=2)))
    three = trace(replace(inputs, cfg=inputs.cfg.with_(n_layer=3)))
    return int(three + (three - two) * (layers - 3))


# ------------------------------------------------------------------ DeepSpeed (analytic)

def forward_backward_bytes(inputs: Inputs, dtype: torch.dtype) -> int:
    """Peak live bytes of the plain model in ``dtype`` (DeepSpeed's bf16/fp16 casts the model)
    over one forward and backward, gradients kept: weights + gradients + activations."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from workloads.models.gpt import GPT

    default = torch.get_default_dtype()
    with FakeTensorMode(allow_non_fake_inputs=True), LiveBytes() as tracker:
        torch.set_default_dtype(dtype)  # the parameters made in the dtype (a fake .to(dtype) cannot swap them)
        try:
            model = GPT(inputs.cfg)
        finally:
            torch.set_default_dtype(default)
        micro = next(_batches((inputs.batch, inputs.seq), 1))
        _, loss = model(*micro[0])
        loss.backward()
        del model, loss
    return tracker.peak


@functools.lru_cache(maxsize=None)
def _forward_backward(inputs: Inputs) -> int:
    """:func:`forward_backward_bytes` in bytes-per-value ``inputs.precision`` (one trace per model
    shape, shared by the ZeRO stages and rank counts)."""
    dtype = torch.float32 if inputs.precision == "4" else torch.bfloat16
    return _by_layers(inputs, lambda each: forward_backward_bytes(each, dtype))


# DeepSpeed's defaults: zero_optimization.reduce_bucket_size (the gradient bucket, allocated
# whole at start-up whatever the model's size) and stage3_param_persistence_threshold (ZeRO-3
# keeps parameters of at most this many elements whole on every rank).
DS_REDUCE_BUCKET = 500_000_000
DS_PERSISTENCE_THRESHOLD = 100_000

# DS_CALIBRATION[(stage group, precision)] = (k, j): the optimizer's states and DeepSpeed's flat
# copies as k*N/d + j*N bytes (N parameters, d ranks). k = 12 for ZeRO-1/2 is the fp32 master
# partition (4) and Adam's two moments (8); j and ZeRO-3's k are least-squares fits to
# peak_tensor_bytes of DeepSpeed 0.19.8 runs on this CPU (tiny and gpt-micro, vocabulary 512,
# batch 4 x 64 tokens, 1 and 2 ranks; tests/workloads/test_predict_memory.py measures them again).
DS_CALIBRATION: dict[tuple[str, str], tuple[float, float]] = {
    ("zero12", "fp32"): (12.0, 3.14), ("zero12", "bf16"): (12.0, 0.66),
    ("zero3", "fp32"): (14.13, 3.45), ("zero3", "bf16"): (23.06, -3.27),
}


def deepspeed_base(inputs: Inputs) -> float:
    """The traced and structural part of :func:`deepspeed_bytes`: the model's forward and
    backward in DeepSpeed's dtype (ZeRO-3: its partitioned parameters and gradients at 1/d),
    plus the reduce bucket."""
    from workloads.models.gpt import GPT

    w = 4 if inputs.precision in ("fp32", "tf32") else 2
    f = float(_forward_backward(replace(inputs, strategy="", devices=1, precision=str(w))))
    if inputs.strategy == "zero3":
        with torch.device("meta"):
            sizes = [p.numel() for p in GPT(inputs.cfg).parameters()]
        partitioned = sum(n for n in sizes if n > DS_PERSISTENCE_THRESHOLD)
        f -= 2 * w * partitioned * (1 - 1 / inputs.devices)  # weights and gradients, 1/d of each
    return f + DS_REDUCE_BUCKET * w


def deepspeed_bytes(inputs: Inputs) -> int:
    """ZeRO stage 1-3 per rank: ``deepspeed_base`` + k*N/d + j*N (DS_CALIBRATION; fp16 as bf16).

    Against the runs it was fitted to, the total is within 0.5%, the reduce bucket (1-2 GB)
    being most of it; the part besides the bucket is off by up to ~30% on the smallest model
    (see the test's printed table).
    """
    from workloads.models.configs import total_params

    n = total_params(inputs.cfg)
    precision = "fp32" if inputs.precision in ("fp32", "tf32") else "bf16"
    k, j = DS_CALIBRATION[("zero3" if inputs.strategy == "zero3" else "zero12", precision)]
    return int(deepspeed_base(inputs) + k * n / inputs.devices + j * n)


# ------------------------------------------------------------------ cached prediction


# FSDP on more ranks than this is extrapolated from its (cached) traces at 2 and 4 ranks: a rank
# holds a + b/N bytes, b the sharded part (parameters, gradients, optimizer states: 1/N each) and
# a the rest (activations, a gathered block, the loss), which N does not change.
FSDP_EXTRAPOLATE_ABOVE = 4
FSDP = ("fsdp-full", "fsdp-grad-op")


def _by_ranks(inputs: Inputs) -> int:
    """FSDP on N > 4 ranks: a + b/N through the traces at 2 and 4 ranks (each cached as the 2- and
    4-rank runs' own predictions). Exact but for FSDP's padding of each parameter's first dimension
    to a multiple of N (at most one row per parameter and rank; none for the gpt2 sizes, whose
    dimensions N divides): traced directly at 8, 16 and 32 ranks, gpt2 .. gpt2-xxxl came out the
    same to the byte (tests/workloads/test_predict_memory.py checks 8)."""
    n = inputs.devices
    two = memory.cached_trace(replace(inputs, devices=2), compute_bytes)
    four = memory.cached_trace(replace(inputs, devices=4), compute_bytes)
    sharded = 4 * (two - four)  # b: b/2 - b/4 = two - four
    return int(round(four - sharded / 4 + sharded / n))


def compute_bytes(inputs: Inputs) -> int:
    """The prediction itself (uncached): traced, or DeepSpeed's analytic model."""
    with warnings.catch_warnings():
        # FSDP's DTensor parameters on the fake CPU mesh: torch warns that random ops may not be
        # supported there; the trace draws no random numbers that matter (only shapes do).
        warnings.filterwarnings("ignore", message="DTensor random operators")
        if inputs.strategy in DEEPSPEED:
            return deepspeed_bytes(inputs)
        if inputs.strategy in FSDP and inputs.devices > FSDP_EXTRAPOLATE_ABOVE:
            return _by_ranks(inputs)
        return _by_layers(inputs, measure_step)


def predict_bytes(p: dict[str, Any], default_model: str = "gpt2") -> int:
    """Peak tensor bytes of one rank of the gpt2 run with values ``p`` (cached: workloads/memory.py)."""
    return memory.cached_trace(Inputs.of(p, default_model), compute_bytes)
