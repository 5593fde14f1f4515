"""Per-rank peak memory of a gpt2 training run, from the program itself (issue 11, study E).

Why: the formulas of ``orchestrator/predict/memory.py`` leave out what a real step allocates (DDP's
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

The optimizer's states are made first (as its first step leaves them), then one training
step is traced: the steady step, as the real run's second and later ones. Deep models, FSDP on
many ranks and DeepSpeed are put together from traces of smaller programs (``orchestrator/predict/traces.py``:
2 and 3 layers, 2 and 4 ranks, the plain forward/backward), so a 100-layer model costs what a
3-layer one does. The trace runs the fused AdamW a CUDA run runs (the workload makes it fused
on the CPU too, ``workloads/strategies.adamw``; fake CUDA tensors cannot be made with torch's
CPU build: "PyTorch is not linked with support for cuda devices") under the CPU's autocast, whose
op lists differ from CUDA's: CUDA runs softmax, layer_norm, exp, pow and the losses in fp32 where
the CPU runs softmax and layer_norm in a 16-bit input's dtype. The workload's model hands none of
those a 16-bit tensor (its manual attention's softmax runs in fp32 explicitly), so its precisions,
and what it saves, are the same on both (``tests/workloads/test_autocast_semantics.py`` records every
call of CUDA's fp32 list under the CPU's autocast). fp16 is traced as bf16 (same bytes; the
GradScaler's ``.item()`` cannot run on fake tensors).

Activation checkpointing is traced like the rest (it is the model's own, ``GPTConfig.checkpointing``),
and so are context parallel (``cp``: each rank's slice of the sequence, the keys and values gathered
over the fake group, ``workloads/context.py``) and tensor parallel with ddp (``tp``, with or without
sequence parallel: the DTensor-sharded model on a fake (pp, dp, tp) mesh, ``workloads/parallel.py``).
Pipeline stages (the schedule's P2P warm-up reads a value: ``_local_scalar_dense``) and FSDP
over a tensor-parallel mesh (``nonzero`` in FSDP2's 2-D sharding) cannot run on fake tensors: ``memory.program_bytes``
returns None for them and the formula (``memory.gpt_training``, which divides states and
activations as the layout does) answers.

DeepSpeed ZeRO 1-3 cannot run on fake tensors (its engine reads values and allocates in
C++): ``traces.deepspeed_bytes`` is an analytic model over the traced forward/backward of
the same model in DeepSpeed's precision (:func:`forward_backward_bytes`): DeepSpeed's documented
sharded states and the buffers of its default configuration, stated there.

A prediction is cached in this process and on disk (``$ORCH_MEMORY_CACHE`` or
``~/.cache/orch/memory``), keyed by a hash of the inputs, the workload code it runs and
torch's version (``orchestrator/predict/memory.py``, which reads the cache without importing torch):
a plan of hundreds of runs traces each model shape once, the missing ones side by side in
worker processes (``memory.prefetch``).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

import torch

from orchestrator.predict.memory_inputs import TRACED, Inputs
from orchestrator.predict.traces import FORWARD_BACKWARD
from workloads.harness.livebytes import LiveBytes
from workloads.layouts import Layout

# ------------------------------------------------------------------ the run's model

class _Session:
    """What ``strategies.build`` and ``TorchTrainer`` ask of a session, for rank 0 of N."""

    def __init__(self, precision: str, world_size: int, zero_grad: str = "none", **options: Any) -> None:
        from types import SimpleNamespace

        from workloads.harness import precision as precisions
        from workloads.harness.device import Device

        self.device = Device("cpu", torch.device("cpu"), "traced", 1)
        # fp16 traces as bf16: the same bytes, and no GradScaler (its .item() needs values).
        self.precision = precisions.resolve("bf16" if precision == "fp16" else precision, self.device,
                                            training=True)
        self.world_size = world_size
        self.rank = 0
        # What the trainers read of the run's options (workloads/strategies.py option()).
        self.args = SimpleNamespace(zero_grad=zero_grad, **options)

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
def _patched(world_size: int, layout: Layout | None = None) -> Iterator[None]:
    """What reads values at start-up, which fake tensors lack, left out or made beforehand:
    DDP's parameter-shape check and broadcast (what they allocate is freed before the first
    step), FSDP's default device mesh and a tensor-parallel layout's (pp, dp, tp) mesh (made
    here on real tensors, then reused)."""
    import torch.nn.parallel.distributed as ddp_module
    from torch.distributed.fsdp._fully_shard import _fully_shard

    from workloads import parallel

    mesh = grid = None
    if world_size and torch.distributed.is_initialized():
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world_size,))
        if layout is not None and layout.model_parallel:
            grid = init_device_mesh("cpu", (layout.pp, layout.dp, layout.tp), mesh_dim_names=("pp", "dp", "tp"))
    saved = (ddp_module._verify_param_shape_across_processes, ddp_module._sync_module_states,
             _fully_shard._init_default_mesh, parallel.make_mesh)
    ddp_module._verify_param_shape_across_processes = lambda *a, **k: None  # type: ignore[assignment]
    ddp_module._sync_module_states = lambda *a, **k: None  # type: ignore[assignment]
    if mesh is not None:
        _fully_shard._init_default_mesh = lambda *a, **k: mesh  # type: ignore[assignment]
    if grid is not None:
        parallel.make_mesh = lambda *a, **k: grid  # type: ignore[assignment]
    try:
        yield
    finally:
        (ddp_module._verify_param_shape_across_processes, ddp_module._sync_module_states,
         _fully_shard._init_default_mesh, parallel.make_mesh) = saved


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


def _make_states(opt: torch.optim.Optimizer) -> None:
    """The optimizer's states, as its first step leaves them, without that step's arithmetic.

    Why: tracing a whole AdamW step costs a third of a leaf (one op per parameter and term, on
    DTensors under FSDP) and adds nothing to the peak: its temporaries live one parameter at a time
    beside the same parameters, gradients and states as the traced step's own optimizer phase. Adam's
    ``_init_group`` is what ``step`` calls first; any other optimizer takes the real step.
    """
    if not isinstance(opt, torch.optim.Adam | torch.optim.AdamW) or not hasattr(opt, "_init_group"):
        opt.step()
        return
    for group in opt.param_groups:
        opt._init_group(group, [], [], [], [], [], [])  # type: ignore[attr-defined]


def measure_step(inputs: Inputs) -> int:
    """Peak live bytes of the strategies' own trainer on fake tensors: the optimizer's states made
    first (as the real first step leaves them, :func:`_make_states`), then one
    training step, the steady one (the real run's second and later steps)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from workloads import trainers

    if inputs.strategy not in TRACED:
        raise ValueError(f"{inputs.strategy} is not traced (traced: {', '.join(TRACED)})")
    session = _Session(inputs.precision, inputs.devices, inputs.zero_grad, optimizer_impl=inputs.optimizer_impl,
                       ddp_single_device=inputs.ddp_single_device, accum_grads=inputs.accum_grads,
                       fsdp_precision=inputs.fsdp_precision)
    needs_group = inputs.strategy != "ddp" or inputs.devices > 1 or inputs.ddp_single_device
    group = _fake_group(inputs.devices) if needs_group else contextlib.nullcontext()
    layout = None
    if inputs.cp > 1 or inputs.tp > 1:
        layout = Layout(tp=inputs.tp, cp=inputs.cp, dp=inputs.devices // (inputs.tp * inputs.cp),
                        sequence_parallel=inputs.sequence_parallel)
    with group, _patched(inputs.devices if needs_group else 0, layout):
        with FakeTensorMode(allow_non_fake_inputs=True), LiveBytes() as tracker:
            trainer = trainers.build(session, inputs.strategy, inputs.cfg, lr=1e-4,  # type: ignore[arg-type]
                                     batch=inputs.batch, accum=inputs.accum, layout=layout)
            if isinstance(trainer.model, torch.nn.parallel.DistributedDataParallel):
                trainer.model.register_comm_hook(None, _in_place_all_reduce)
                trainer.model.reducer = _NoRebuild(trainer.model.reducer)
            opt = trainer.opt  # type: ignore[attr-defined]
            for param in trainer.model.parameters():
                param.grad = torch.zeros_like(param)
            _make_states(opt)
            # As the first step leaves them: freed, or (zero_grad zeros) zeroed and kept.
            opt.zero_grad(set_to_none=inputs.zero_grad == "none")
            trainer.step(next(_batches((inputs.batch, inputs.seq), inputs.accum)))
            del trainer, opt
        return tracker.peak


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


# ------------------------------------------------------------------ one leaf, and a whole prediction

def trace_leaf(leaf: Inputs) -> int:
    """Peak live bytes of one of ``traces.leaves``: the training step (:func:`measure_step`) or, for
    DeepSpeed's, the plain model's forward and backward (:func:`forward_backward_bytes`)."""
    with warnings.catch_warnings():
        # FSDP's DTensor parameters on the fake CPU mesh: torch warns that random ops may not be
        # supported there; the trace draws no random numbers that matter (only shapes do).
        warnings.filterwarnings("ignore", message="DTensor random operators")
        if leaf.strategy == FORWARD_BACKWARD:
            return forward_backward_bytes(leaf, torch.float32 if leaf.precision == "fp32" else torch.bfloat16)
        return measure_step(leaf)
