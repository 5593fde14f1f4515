"""Training loop shared by the language-model workloads (gpt2, genslm).

A step is one optimiser step: ``grad_accum`` micro-batches of ``batch_size`` x
``seq_len`` tokens per rank, forward + backward each, then the update. Data
loading is inside the step (the dataset-size study measures it).

- By steps (``--epochs 0``): ``--warmup`` untimed steps, then ``--iters`` timed.
- By epochs (``--epochs E``): E passes over the data (``--max-steps-per-epoch``
  caps a pass); every step is timed, the first ``--warmup`` are left out of the
  step statistics; ``epoch_time_s`` is the second epoch's time (the first
  includes start-up and compilation) or the only one's, averaged over ranks.

Model FLOPs per token: 6N + 12*L*h*s, N the parameters without the position
embedding (token embedding counted once: it is the tied output head), attention
counted over the full s x s square (causal masking not halved); recompute would
add hardware FLOPs, not model FLOPs. Study D's "model TFLOP/s per device"
(llm-foundry's 3 x (2N + 4*L*h*s) per token, N with the tied embedding once) is the
same count, so ``tflops_per_device`` is its figure. The references give study A no
FLOP formula of its own (it reports tokens/s), so none is added for it.

Figures (definitions: ``db/glossary_metrics.yaml``; T = ``timed_time_s``, the sum of
the timed steps' times, each the slowest rank's; n = timed steps):

- ``tokens_per_s`` = tokens_per_step x n / T, tokens_per_step = b x s x m x dp
  (studies A, B: total tokens over total time); ``tokens_per_s_median`` =
  tokens_per_step / median step time. m = micro-batches per step (``grad_accum``, or
  ``microbatches`` with pipeline stages), dp = data-parallel replicas = ranks / (tp x pp x cp)
  (``workloads/layouts.py``; ranks of one replica read the same data; cp ranks share each
  sequence, so they are one replica).
- ``samples_per_s`` = global_batch x n / T, global_batch = b x m x dp;
  ``samples_per_s_median`` likewise at the median step.
- ``tflops`` = flops_per_token x tokens_per_s / 1e12 (all ranks); ``tflops_median`` at
  the median step; ``tflops_per_device`` = tflops / ranks (study D);
  ``mfu`` = tflops / (ranks x --peak-tflops).
- By epochs: ``epoch_time_s`` the second epoch's wall time (the only one's with
  --epochs 1) averaged over ranks (study B), ``epoch_time_max_s`` its slowest rank,
  ``epoch_tokens_per_s`` = tokens_per_step x steps_per_epoch / epoch_time_s. The
  step-based figures above cover every step after the first --warmup, across epochs.
- ``dp``, ``tp``, ``pp``, ``cp``, ``microbatches``: the layout (settings, stored for SQL). ``loss`` is
  rank 0's, that of the step's last micro-batch (with pipeline stages: on the last stage).
- ``compile_s`` (``--compile`` only): the wall time of the first optimiser step, which traces and
  compiles the model (``torch.compile``) and runs once, the slowest rank's, timed apart from every
  other step from an idle device to an idle device; it is never a timed step (with ``--warmup 0`` it
  is an extra untimed step; by epochs it is the first step of the first epoch, always left out).
- ``series.loss`` (beside ``metrics``, ``workloads/harness/series.py``): the loss as ``loss`` above of
  every k-th optimiser step, warm-up included, k chosen so at most 1,000 points are kept.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

import torch

from workloads import flops, trainers
from workloads.data.sources import Batch, Synthetic, Windows
from workloads.harness import Refused, Session
from workloads.harness.livebytes import LiveBytes
from workloads.harness.series import StepSeries
from workloads.harness.timing import first_step_time, rate, rate_figures
from workloads.layouts import Layout
from workloads.models.configs import GPTConfig, num_params
from workloads.strategies import Trainer

# Called once the trainer exists (e.g. to prune its weights); what it returns is called after
# the timed steps and gives extra metrics.
Prepare = Callable[[Trainer], Callable[[], dict[str, Any]]]


def run(session: Session, cfg: GPTConfig, source: Synthetic | Windows, prepare: Prepare | None = None,
        layout: Layout | None = None) -> None:
    args = session.args
    # Data parallel over every rank unless the workload gives a tensor/pipeline layout.
    layout = layout or Layout(dp=session.world_size, microbatches=max(1, args.grad_accum))
    b, s, accum = args.batch_size, args.seq_len, layout.microbatches
    dp, dp_rank = layout.dp, layout.dp_rank(session.rank)  # ranks of one replica read the same data
    if b < 1 or s < 1:
        raise Refused(f"batch size and sequence length must be positive (got {b}, {s})")
    if source.max_token is not None and source.max_token >= cfg.vocab_size:
        raise Refused(f"data {source.name} has token ids up to {source.max_token}, "
                      f"more than the vocabulary of {cfg.vocab_size}")
    if args.epochs > 0 and not source.has_epochs:
        raise Refused(f"--epochs needs a finite dataset (--data text or file:/path), not {source.name}")

    # peak_tensor_bytes (CPU): live tensor bytes from the model's construction through the second
    # step, the figure orchestrator/predict/memory_trace.py predicts (CUDA's max_memory_allocated without
    # its rounding).
    tracking = contextlib.ExitStack()
    cpu = session.device.type == "cpu" and not getattr(args, "compile", False)  # no dispatch mode under compile
    tracker = tracking.enter_context(LiveBytes()) if cpu else None
    trainer = trainers.build(session, args.strategy, cfg, lr=args.lr, batch=b, accum=accum,
                             compile_=getattr(args, "compile", False), layout=layout)
    extra_metrics = prepare(trainer) if prepare is not None else None
    n = num_params(cfg)
    session.log(f"{args.strategy}: {n / 1e6:.1f}M parameters (without position embedding), "
                f"{session.world_size} rank(s) (dp {dp} x tp {layout.tp} x pp {layout.pp} x cp {layout.cp}), "
                f"batch {b} x seq {s} x {accum} micro-batch(es)")

    done = 0
    compiles = bool(getattr(args, "compile", False))
    compile_s: float | None = None
    losses = StepSeries(_total_steps(args, source, b, s, dp, accum, compiles))

    def step(it: Iterator[Batch]) -> torch.Tensor:
        nonlocal done
        loss = trainer.step([next(it) for _ in range(accum)])
        done += 1
        losses.offer(done, loss)  # held on the device, read after the timed steps
        if done == 2:  # the second step is the steady one (later steps repeat it): tracking ends,
            tracking.close()  # so with --warmup >= 2 no timed step pays for it
        return loss

    epoch_times: list[float] = []
    steps_per_epoch: int | None = None
    if args.epochs <= 0:
        it = source.batches(b, s, dp_rank, dp)
        warmup = args.warmup
        if compiles:  # the compiling step, timed apart and never a timed step
            compile_s = session.max_all(first_step_time(session.device, lambda: step(it)))
            warmup = max(warmup - 1, 0)
        for _ in range(warmup):
            loss = step(it)
        clock = session.clock()
        clock.start()
        for _ in range(args.iters):
            loss = step(it)
            clock.lap()
        times = clock.times()
        warmup = max(args.warmup, 1) if compiles else args.warmup
    else:
        if not isinstance(source, Windows):  # the harness refuses --epochs on synthetic data first
            raise Refused("--epochs needs a dataset (synthetic tokens have no epochs)")
        steps_per_epoch = source.steps_per_epoch(b, s, dp) // accum
        if args.max_steps_per_epoch > 0:
            steps_per_epoch = min(steps_per_epoch, args.max_steps_per_epoch)
        if steps_per_epoch < 1:
            raise Refused(f"{source.name}: less than one step per epoch at batch {b} x {accum} on "
                          f"{dp} data-parallel replica(s)")
        all_times: list[float] = []
        for epoch in range(args.epochs):
            it = source.epoch(epoch, b, s, dp_rank, dp)
            clock = session.clock()
            clock.start()  # synchronises: the epoch starts with an idle device
            began = time.perf_counter()
            for _ in range(steps_per_epoch):
                loss = step(it)
                clock.lap()
            all_times += clock.times()  # waits for the device: the epoch has ended
            epoch_times.append(time.perf_counter() - began)
        warmup = min(max(args.warmup, 1) if compiles else args.warmup, len(all_times) - 1)
        times = all_times[warmup:]
        if compiles and all_times:
            compile_s = session.max_all(all_times[0])  # the first epoch's first step compiled

    tracking.close()
    steps = session.slowest_steps(times)
    tokens_per_step = b * s * accum * dp
    global_batch = b * accum * dp
    per_token = flops.gpt_train_flops_per_token(n, cfg.n_layer, cfg.n_embd, s)
    model_flops = rate(per_token * tokens_per_step, steps).total  # FLOP/s, all ranks
    final_loss = trainer.final_loss(loss)
    results: dict[str, Any] = {
        **rate_figures("tokens_per_s", tokens_per_step, steps),
        **rate_figures("samples_per_s", global_batch, steps),
        **rate_figures("tflops", per_token * tokens_per_step / 1e12, steps),
        "tflops_per_device": model_flops / session.world_size / 1e12,
        "mfu": session.mfu(model_flops),
        "model_params": n,
        "model_params_with_position": num_params(cfg, include_position=True),
        "flops_per_token": per_token,
        "tokens_per_step": tokens_per_step,
        "global_batch": global_batch,
        "loss": final_loss,
        "dp": dp,
        "tp": layout.tp,
        "pp": layout.pp,
        "cp": layout.cp,
        "microbatches": accum,
    }
    if compile_s is not None:
        results["compile_s"] = compile_s
    if tracker is not None:
        results["peak_tensor_bytes"] = int(session.max_all(tracker.peak))
    if extra_metrics is not None:
        results.update(extra_metrics())
    timing_extra: dict[str, Any] = {}
    if epoch_times:
        chosen = 1 if len(epoch_times) >= 2 else 0
        per_rank = session.gather(epoch_times[chosen])
        results["epoch_time_s"] = sum(per_rank) / len(per_rank)  # averaged over ranks
        results["epoch_time_max_s"] = max(per_rank)
        results["steps_per_epoch"] = steps_per_epoch
        results["epoch_tokens_per_s"] = tokens_per_step * steps_per_epoch / results["epoch_time_s"]
        timing_extra = {"epoch_times_s": epoch_times, "timed_epoch": chosen + 1}
    series = {"loss": losses.read(trainer.final_loss)}  # collective where final_loss is
    session.finish(results, steps, warmup_steps=warmup, timing_extra=timing_extra, already_gathered=True,
                   extra={"series": series})


def _total_steps(args: Any, source: Synthetic | Windows, b: int, s: int, dp: int, accum: int, compiles: bool) -> int:
    """Optimiser steps the run will take (sizes the loss series' stride)."""
    if args.epochs <= 0:
        return (max(args.warmup, 1) if compiles else args.warmup) + args.iters
    per_epoch = source.steps_per_epoch(b, s, dp) // accum if isinstance(source, Windows) else 0
    if args.max_steps_per_epoch > 0:
        per_epoch = min(per_epoch, args.max_steps_per_epoch)
    return args.epochs * max(per_epoch, 1)
