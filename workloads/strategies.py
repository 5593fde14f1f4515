"""Data-parallel strategies for training a model: how a step's gradients and states are shared.

- ``ddp``: ``DistributedDataParallel`` (every rank holds everything; gradients all-reduced).
  One rank alone runs the plain model (DDP over one rank only adds a no-op all-reduce).
- ``fsdp-full`` / ``fsdp-grad-op``: PyTorch FSDP2 (``fully_shard``) per transformer block and
  the root; parameters re-sharded after forward (FULL_SHARD, ~ZeRO-3) or kept gathered until
  after backward (SHARD_GRAD_OP, ~ZeRO-2). Built on the meta device and materialised shard
  by shard, so a model need not fit one device unsharded.
- ``zero1`` / ``zero2`` / ``zero3``: DeepSpeed ZeRO stages (imported only when asked for).

Tensor and pipeline parallel layouts (``tp``/``pp`` > 1, ``workloads/layouts.py``) are built by
``workloads/parallel.py``, context parallel (``cp`` > 1) by ``workloads/context.py``, each chosen by
``workloads/trainers.py``; activation checkpointing is the model's own (``GPTConfig.checkpointing``).

Precision: ddp/fsdp keep fp32 weights and run under autocast (fp16 adds a GradScaler);
DeepSpeed uses its own fp16 (dynamic loss scale) or bf16 mode with fp32 master weights.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.nn as nn

from workloads.harness import Refused, Session
from workloads.models.configs import GPTConfig
from workloads.models.gpt import GPT

STRATEGIES: tuple[str, ...] = ("ddp", "fsdp-full", "fsdp-grad-op", "zero1", "zero2", "zero3")

Batch = tuple[torch.Tensor, torch.Tensor]


class Trainer:
    """One optimiser step over a list of micro-batches (gradient accumulation)."""

    model: nn.Module

    def step(self, micro: list[Batch]) -> torch.Tensor:
        raise NotImplementedError

    def final_loss(self, loss: torch.Tensor) -> float:
        """The loss to report from what ``step`` returned (pipeline stages: the last stage's)."""
        return float(loss.float().item())


# Devices with torch's fused AdamW kernel (torch/optim/adamw.py's fused path; the CPU's since torch
# 2.4). Gaudi's HPU runs Habana's own optimizers: the foreach default there.
FUSED_ADAMW_DEVICES = ("cuda", "xpu", "cpu")
# --optimizer-impl: auto (fused where the device has the kernel: orch's default), or the one a
# study's program used: foreach (torch's own default on GPUs, e.g. study B's Lightning setup),
# fused, or for-loop (one kernel per parameter).
OPTIMIZER_IMPLS: tuple[str, ...] = ("auto", "fused", "foreach", "for-loop")
# --accum-grads, how FSDP accumulates gradients over micro-batches: unsharded (gradient sync off
# until the last micro-batch, unsharded fp32 gradients kept: orch's default) or sharded
# (reduce-scatter after every micro-batch, only the shard kept, as LLM Foundry's FSDP and
# DeepSpeed's ZeRO do it).
ACCUM_GRADS: tuple[str, ...] = ("unsharded", "sharded")


def option(session: Session, name: str, default: Any) -> Any:
    """A program option of the run (``session.args``), or ``default`` where the run has none."""
    value = getattr(getattr(session, "args", None), name, None)
    return default if value in (None, "") else value


def adamw(session: Session, params: Iterable[nn.Parameter], lr: float, *,
          mixed_tensors: bool = False) -> torch.optim.Optimizer:
    """AdamW as every trainer here makes it: fused into one kernel where torch has that kernel (CUDA,
    XPU and the CPU alike, so that a CPU run and the memory trace, which runs on the CPU, hold what
    a GPU run holds: no foreach temporaries); one kernel per parameter where the parameters mix
    DTensors and plain tensors (tensor parallel: the replicated LayerNorms and position embedding),
    which foreach and fused kernels cannot take in one list. ``--optimizer-impl`` other than auto
    picks the implementation instead (a study's program's)."""
    impl = str(option(session, "optimizer_impl", "auto"))
    if mixed_tensors or impl == "for-loop":
        return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    if impl == "foreach":
        return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    fused = session.device.type in FUSED_ADAMW_DEVICES
    if impl == "fused" and not fused:
        raise Refused(f"--optimizer-impl fused: torch has no fused AdamW on {session.device.type} "
                      f"(it has: {', '.join(FUSED_ADAMW_DEVICES)})")
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, fused=fused or None)


def grads_to_none(session: Session) -> bool:
    """Whether the optimiser frees the gradients between steps (``--zero-grad none``, the default)
    or zeroes them in place and keeps them (``zeros``: torch 1.x's default, a 2022 program's memory)."""
    return str(getattr(getattr(session, "args", None), "zero_grad", None) or "none") == "none"


class TorchTrainer(Trainer):
    """ddp, fsdp and the plain single-rank model; with its hooks, tensor parallel too (workloads/parallel.py).

    ``sync(is_last_micro_batch)``: a context around each micro-batch (DDP's ``no_sync`` but on the
    last); ``loss_context()``: around each forward and backward (tensor parallel's loss_parallel);
    ``after_backward()``: after the last backward, before the optimiser (a model-parallel layout's
    data-parallel gradient average); ``optimizer``: in place of the default AdamW.
    """

    def __init__(self, session: Session, model: nn.Module, forward: Callable[..., Any],
                 sync: Callable[[bool], contextlib.AbstractContextManager[Any]], lr: float, *,
                 optimizer: torch.optim.Optimizer | None = None,
                 loss_context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
                 after_backward: Callable[[], None] = lambda: None) -> None:
        self.session = session
        self.model = model
        self.forward = forward
        self.sync = sync
        self.loss_context = loss_context
        self.after_backward = after_backward
        self.opt = adamw(session, model.parameters(), lr) if optimizer is None else optimizer
        self.scaler = session.precision.grad_scaler(session.device)
        self.to_none = grads_to_none(session)

    def step(self, micro: list[Batch]) -> torch.Tensor:
        prec, dev = self.session.precision, self.session.device
        loss = torch.zeros(())
        for i, (x, y) in enumerate(micro):
            with self.sync(i == len(micro) - 1), self.loss_context():
                with prec.autocast(dev):
                    _, loss = self.forward(x, y)
                scaled = loss / len(micro)
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        self.after_backward()
        if self.scaler:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad(set_to_none=self.to_none)
        return self.local_loss(loss.detach())

    def local_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The step's loss as this rank holds it (tensor parallel: a DTensor's local part)."""
        return loss


class DeepSpeedTrainer(Trainer):
    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.model = engine.module

    def step(self, micro: list[Batch]) -> torch.Tensor:
        loss = torch.zeros(())
        for x, y in micro:
            _, loss = self.engine(x, y)
            self.engine.backward(loss)  # scales by 1/accumulation steps itself
            self.engine.step()  # steps the optimiser at the accumulation boundary only
        return loss.detach()


def _ddp(session: Session, cfg: GPTConfig, lr: float, compile_: bool) -> Trainer:
    with session.device.torch_device:  # parameters made on the device directly
        model = GPT(cfg)
    # --ddp-single-device: DDP wraps one rank too, as Lightning does (its bucketed gradient copies
    # and a one-rank all-reduce); by default one rank runs the plain model.
    if session.world_size == 1 and not option(session, "ddp_single_device", False):
        forward = torch.compile(model) if compile_ else model
        return TorchTrainer(session, model, forward, lambda last: contextlib.nullcontext(), lr)
    from torch.nn.parallel import DistributedDataParallel as DDP

    if session.world_size == 1:
        session.ensure_process_group()  # DDP needs a group even on one rank

    ids = [session.device.torch_device.index] if session.device.type == "cuda" else None
    wrapped = DDP(model, device_ids=ids)
    forward = torch.compile(wrapped) if compile_ else wrapped
    # no_sync on all but the last micro-batch: one all-reduce per optimiser step.
    return TorchTrainer(session, wrapped, forward,
                        lambda last: contextlib.nullcontext() if last else wrapped.no_sync(), lr)


def _fsdp(session: Session, cfg: GPTConfig, lr: float, compile_: bool, full: bool) -> Trainer:
    from torch.distributed.fsdp import fully_shard

    session.ensure_process_group()  # FSDP needs a group even on one rank
    with torch.device("meta"):
        model = GPT(cfg)
    # --fsdp-precision pure (LLM Foundry's FSDP mixed_precision PURE): parameters gathered and computed
    # in the run's half precision, gradients reduced in fp32; default: fp32 gathered, autocast compute.
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(session.precision.name)
    policy: dict[str, Any] = {}
    if option(session, "fsdp_precision", "autocast") == "pure" and half is not None:
        from torch.distributed.fsdp import MixedPrecisionPolicy

        policy["mp_policy"] = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, reshard_after_forward=full, **policy)
    fully_shard(model, reshard_after_forward=full, **policy)
    model.to_empty(device=session.device.torch_device)
    if cfg.tie_weights and model.lm_head.weight is not model.wte.weight:  # FSDP2 keeps the tie; to_empty not
        model.lm_head.weight = model.wte.weight
    model.reset_parameters()
    forward = torch.compile(model) if compile_ else model
    every = option(session, "accum_grads", "unsharded") == "sharded"  # reduce-scatter every micro-batch

    @contextlib.contextmanager
    def sync(last: bool) -> Iterator[None]:
        model.set_requires_gradient_sync(last or every)  # type: ignore[operator]  # FSDP2 adds it; by default reduce-scatter on the last micro-batch only
        yield

    return TorchTrainer(session, model, forward, sync, lr)


# DeepSpeed's communication backend loads a C++ op (shm_comm on CPU) when it starts. Missing from
# the install, the op is compiled on first use: minutes inside the timed run, under a lock in
# the shared extensions cache that a killed run leaves behind for every later one to wait on.
# scripts/setup.sh installs DeepSpeed with the op built in (DS_BUILD_SHM_COMM=1); a run never builds.
def _op_build_needed() -> str | None:
    """Why starting DeepSpeed here would compile an op (a refusal), or None."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import installed_ops

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return None  # this accelerator's backend loads no such op
    if installed_ops.get(builder.NAME, False):
        return None  # built into the install
    from torch.utils.cpp_extension import _get_build_directory

    build_dir = Path(_get_build_directory(builder.NAME, verbose=False))
    if (build_dir / "lock").exists():
        return (f"DeepSpeed's {builder.NAME} op is not built into this install and {build_dir / 'lock'} is held "
                "(a build was interrupted): remove that file and reinstall DeepSpeed with the op built in "
                "(scripts/setup.sh does: DS_BUILD_SHM_COMM=1 pip install --no-build-isolation deepspeed)")
    if not (build_dir / f"{builder.NAME}.so").exists():
        return (f"DeepSpeed's {builder.NAME} op is not built into this install: this run would compile it inside "
                "its timed region; reinstall DeepSpeed with the op built in (scripts/setup.sh does: "
                "DS_BUILD_SHM_COMM=1 pip install --no-build-isolation deepspeed)")
    return None  # compiled earlier into the extensions cache: loaded, not built


def _deepspeed(session: Session, cfg: GPTConfig, lr: float, stage: int, batch: int, accum: int) -> Trainer:
    try:
        import deepspeed
    except Exception as exc:  # ImportError, or a broken install failing at import
        raise Refused(f"strategy zero{stage} needs DeepSpeed, which is not importable here "
                      f"({type(exc).__name__}: {exc}); install it with `pip install deepspeed`") from exc
    problem = _op_build_needed()
    if problem:
        raise Refused(problem)
    session.ensure_process_group()  # DeepSpeed reuses the group the harness made
    with session.device.torch_device:
        model = GPT(cfg)
    name = session.precision.name
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": accum,
        "train_batch_size": batch * accum * session.world_size,
        "zero_optimization": {"stage": stage},
        "fp16": {"enabled": name == "fp16"},
        "bf16": {"enabled": name == "bf16"},
        "zero_allow_untested_optimizer": True,  # torch's AdamW, same optimiser as ddp/fsdp
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    # DeepSpeed keeps torch's default AdamW (foreach on GPUs) unless --optimizer-impl names one;
    # its gradient accumulation is its own (partitioned gradients under ZeRO-2/3).
    optimizer = (torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
                 if option(session, "optimizer_impl", "auto") == "auto" else adamw(session, model.parameters(), lr))
    try:
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config,
                                          dist_init_required=False)
    except ValueError as exc:
        if "not supported" in str(exc):
            raise Refused(f"DeepSpeed: {exc} ({session.device.type}, {name})") from exc
        raise
    return DeepSpeedTrainer(engine)


def build(session: Session, strategy: str, cfg: GPTConfig, *, lr: float, batch: int, accum: int,
          compile_: bool = False) -> Trainer:
    """The data-parallel trainer of ``strategy`` (ddp, FSDP or a DeepSpeed ZeRO stage) over every
    rank; a layout with context, tensor or pipeline parallelism is built by ``workloads/trainers.py``."""
    if strategy == "ddp":
        return _ddp(session, cfg, lr, compile_)
    if strategy in ("fsdp-full", "fsdp-grad-op"):
        return _fsdp(session, cfg, lr, compile_, full=strategy == "fsdp-full")
    if strategy in ("zero1", "zero2", "zero3"):
        if compile_:
            raise Refused("--compile is not supported with DeepSpeed strategies here")
        return _deepspeed(session, cfg, lr, int(strategy[-1]), batch, accum)
    raise Refused(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
