"""The loop shared by the model benchmarks of the AI-testbed study (unet, bert, resnet50,
distilbert, braggnn, candle_uno): a model, a synthetic batch, a loss, the forward FLOPs.

- Training (``mode train``): a step is ``grad_accum`` micro-batches of forward, loss and
  backward, then the optimiser step; several ranks train data-parallel (DDP, gradients
  all-reduced once per step). fp16/bf16 run under autocast with fp32 weights (fp16 adds a
  GradScaler), as mixed-precision training does.
- Inference (``mode inference``): eval mode under ``torch.inference_mode``, the weights
  cast to the precision's dtype (fp16/bf16 inference keeps no fp32 copy); a step is one
  batch and its time is the latency of that batch. Each rank serves its own batches.

The batches are made once on the device from a seeded generator (two of them, used in
turn), so neither data loading nor random-number generation is timed. Timing, peak memory
and the metrics file are the harness's (``workloads/harness``); per-step times are the
slowest rank's.

Figures (definitions: ``db/glossary_metrics.yaml``; T = ``timed_time_s``, the sum of the
timed steps' times; n = timed steps; study C.2/C.3 figures):

- ``samples_per_s`` = global_batch x n / T, global_batch = batch x accum x ranks (samples
  per optimiser step, or per inference step, over all ranks); ``samples_per_s_median`` =
  global_batch / median step time.
- ``tokens_per_s`` (``tokens_per_s_median``) = samples_per_s (its median form) x the
  sequence length, where a sample is a sequence (BERT, DistilBERT).
- ``tflops`` = flops_per_sample x samples_per_s / 1e12, flops_per_sample = forward FLOPs
  x (3 training, 1 inference); ``tflops_median`` at the median step;
  ``tflops_per_device`` = tflops / ranks; ``mfu`` = tflops / (ranks x --peak-tflops).
- Inference: ``latency_p50_s``, ``latency_p90_s``, ``latency_mean_s`` of one batch's step,
  ``latency_per_sample_p50_s`` = latency_p50_s / batch.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn

from workloads import flops
from workloads.harness import Refused, Session
from workloads.harness.timing import percentile, rate, rate_figures

MODES = ("train", "inference")

# inputs (positional arguments of the model), target (whatever the loss takes)
Batch = tuple[tuple[Any, ...], Any]


@dataclass
class Bench:
    model: nn.Module
    make_batch: Callable[[torch.Generator, torch.device], Batch]  # one batch of ``batch_size`` samples
    loss: Callable[[Any, Any], torch.Tensor]  # (model output, target) -> scalar, training only
    flops_forward_per_sample: int
    batch_size: int
    optimizer: str = "adamw"  # adamw | sgd (momentum 0.9, as ResNet is trained)
    lr: float = 1e-4
    tokens_per_sample: int = 0  # a sequence's length: adds tokens_per_s
    channels_last: bool = False  # 4-D image inputs and conv weights in NHWC
    extra: dict[str, Any] = field(default_factory=dict)  # added to the metrics


def _cast(value: Any, dtype: torch.dtype | None, channels_last: bool) -> Any:
    """Floating tensors to ``dtype`` (ids and labels stay integers); 4-D ones to NHWC if asked."""
    if isinstance(value, tuple):
        return tuple(_cast(v, dtype, channels_last) for v in value)
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        if channels_last and value.dim() == 4:
            value = value.contiguous(memory_format=torch.channels_last)
    return value


def _optimizer(bench: Bench, model: nn.Module, device_type: str) -> torch.optim.Optimizer:
    if bench.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=bench.lr, momentum=0.9, weight_decay=1e-4)
    fused = device_type == "cuda"  # one kernel for the whole update
    return torch.optim.AdamW(model.parameters(), lr=bench.lr, weight_decay=0.01, fused=fused or None)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def run(session: Session, bench: Bench, mode: str, grad_accum: int = 1) -> None:
    if mode not in MODES:
        raise Refused(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    if bench.batch_size < 1 or grad_accum < 1:
        raise Refused(f"batch size and accumulation steps must be positive (got {bench.batch_size}, {grad_accum})")
    if mode == "inference" and grad_accum != 1:
        raise Refused("gradient accumulation is a training setting (--mode inference takes --grad-accum 1)")
    dev, prec = session.device, session.precision
    if dev.type == "cuda" and bench.channels_last:
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its fastest kernels
    model = bench.model.to(dev.torch_device)
    n_params = num_params(model)
    if bench.channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # in torch, not its stubs
    gen = torch.Generator(device="cpu").manual_seed(1000 + session.rank)  # ranks see different data
    half = prec.dtype if prec.dtype in (torch.float16, torch.bfloat16) else None
    inference = mode == "inference"
    if inference:
        model.eval()
        if half is not None:
            model = model.to(half)  # inference in half precision keeps no fp32 weights
    pool = [_cast(bench.make_batch(gen, dev.torch_device), half if inference else None, bench.channels_last)
            for _ in range(2)]
    batches = itertools.cycle(pool)
    last_loss: list[torch.Tensor] = []

    if inference:
        def step() -> Any:
            inputs, _ = next(batches)
            with torch.inference_mode():
                return model(*inputs)
    else:
        model.train()
        forward: nn.Module = model
        sync: Callable[[bool], Any] = lambda last: contextlib.nullcontext()
        if session.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [dev.torch_device.index] if dev.type == "cuda" else None
            forward = DDP(model, device_ids=ids)
            # no_sync on all but the last micro-batch: one all-reduce per optimiser step.
            sync = lambda last: contextlib.nullcontext() if last else forward.no_sync()  # noqa: E731
        opt = _optimizer(bench, model, dev.type)
        scaler = prec.grad_scaler(dev)

        def step() -> Any:
            for i in range(grad_accum):
                inputs, target = next(batches)
                with sync(i == grad_accum - 1):
                    with prec.autocast(dev):
                        loss = bench.loss(forward(*inputs), target)
                    scaled = loss / grad_accum
                    (scaler.scale(scaled) if scaler else scaled).backward()
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
            last_loss[:] = [loss.detach()]

    session.log(f"{mode}: {n_params / 1e6:.2f}M parameters, {session.world_size} rank(s), "
                f"batch {bench.batch_size}" + (f" x accumulation {grad_accum}" if grad_accum > 1 else ""))
    session.barrier()
    steps = session.slowest_steps(session.time_steps(step))
    p50 = percentile(steps, 50)
    samples_per_step = bench.batch_size * grad_accum * session.world_size
    per_sample = bench.flops_forward_per_sample * (flops.TRAIN_FACTOR if mode == "train" else 1)
    model_flops = rate(per_sample * samples_per_step, steps).total  # FLOP/s, all ranks
    results: dict[str, Any] = {
        **rate_figures("samples_per_s", samples_per_step, steps),
        **rate_figures("tflops", per_sample * samples_per_step / 1e12, steps),
        "tflops_per_device": model_flops / session.world_size / 1e12,
        "mfu": session.mfu(model_flops),
        "flops_per_sample": float(per_sample),
        "flops_forward_per_sample": float(bench.flops_forward_per_sample),
        "model_params": n_params,
        "global_batch": samples_per_step,
    }
    if bench.tokens_per_sample:
        results.update(rate_figures("tokens_per_s", samples_per_step * bench.tokens_per_sample, steps))
    if inference:
        results.update({
            "latency_p50_s": p50,
            "latency_p90_s": percentile(steps, 90),
            "latency_mean_s": sum(steps) / len(steps),
            "latency_per_sample_p50_s": p50 / bench.batch_size,
        })
    else:
        results["loss"] = float(last_loss[0].float().item())
    results.update(bench.extra)
    session.finish(results, steps, already_gathered=True)
