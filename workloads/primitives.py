"""Shared timing of the DL primitives (conv2d, relu, lstm): forward, and backward on request.

Without ``--backward`` the forward runs under ``torch.inference_mode`` (no autograd
bookkeeping) and is the step. With it, each step is forward then backward (the
gradient of the output is a fixed random tensor), timed separately; the step
time is their sum. Each rank runs its own primitive; every rate is each rank's own,
summed over ranks, as for the GEMM.

Figures (definitions: ``db/glossary_metrics.yaml``; study C.1, DeepBench shapes; for a
rank, n timed steps, T its summed step time, T_fwd / T_bwd its summed forward / backward
time; DeepBench averages its timed repeats, i.e. total work over total time):

- ``tflops`` = sum over ranks of flops_per_step x n / T / 1e12, flops_per_step =
  flops_forward (+ flops_backward with --backward); ``tflops_median`` at each rank's
  median step; ``tflops_per_device`` = tflops / ranks; ``mfu`` = tflops / (ranks x peak).
- ``samples_per_s`` = sum over ranks of batch x n / T; ``samples_per_s_median`` likewise.
- ``tflops_forward`` = sum over ranks of flops_forward x n / T_fwd / 1e12 (``_median`` at
  the median forward time); ``tflops_backward`` likewise with --backward;
  ``forward_time_p50_s`` / ``backward_time_p50_s``: the slowest rank's median.
- ``bandwidth_gbs`` (memory-bound primitives) = sum over ranks of bytes_forward x n /
  T_fwd / 1e9 (``bandwidth_gbs_median`` likewise).
- Another count of the same work (``alt_forward_flops``, e.g. LSTM ``full``, conv2d
  ``study_c``) gives ``flops_forward_<name>``, ``flops_per_step_<name>``,
  ``tflops_<name>`` and ``tflops_forward_<name>`` at the same (total-based) timings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from workloads.harness import Refused, Session
from workloads.harness.timing import IntervalClock, percentile, rate_figures, sum_figures


@dataclass
class Primitive:
    forward: Callable[[], torch.Tensor]
    flops_forward: int
    flops_backward: int
    batch: int
    # Bytes a forward reads and writes at least once (for a bandwidth figure); 0: not reported.
    bytes_forward: int = 0
    # Tensors whose .grad is cleared between steps.
    grads: list[torch.Tensor] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Other forward FLOP counts of the same work (e.g. LSTM "full"): each gives tflops_<name>
    # and tflops_forward_<name> at the same timings, backward scaled alike.
    alt_forward_flops: dict[str, float] = field(default_factory=dict)


def _unsupported(session: Session, what: str, exc: RuntimeError) -> Refused:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Refused(f"{what} in {session.precision.name} is not available on {session.device.type} "
                   f"in this PyTorch: {first}")


def run(session: Session, what: str, prim: Primitive, backward: bool) -> None:
    args = session.args
    if not backward:
        def step() -> torch.Tensor:
            with torch.inference_mode():
                return prim.forward()

        try:
            step()  # the first call also tells whether this dtype/device pair exists
        except RuntimeError as exc:
            raise _unsupported(session, what, exc) from exc
        session.barrier()
        times = session.time_steps(step)
        fwd_times = times
        bwd_times: list[float] = []
    else:
        try:
            out = prim.forward()
        except RuntimeError as exc:
            raise _unsupported(session, what, exc) from exc
        grad_out = torch.randn_like(out)

        def clear() -> None:
            for tensor in prim.grads:
                tensor.grad = None

        for _ in range(args.warmup):
            prim.forward().backward(grad_out)
            clear()
        session.barrier()
        clock = IntervalClock(session.device)
        with session.metering():  # energy over the timed steps, which this loop times itself
            for _ in range(args.iters):
                clock.begin("fwd")
                out = prim.forward()
                clock.end("fwd")
                clock.begin("bwd")
                out.backward(grad_out)
                clock.end("bwd")
                clear()
        fwd_times, bwd_times = clock.times("fwd"), clock.times("bwd")
        times = [f + b for f, b in zip(fwd_times, bwd_times)]

    flops_step = prim.flops_forward + (prim.flops_backward if backward else 0)
    # Each rank's own rates (total-based and median-based), summed over ranks.
    own: dict[str, float] = {
        **rate_figures("tflops", flops_step / 1e12, times),
        **rate_figures("samples_per_s", prim.batch, times),
        **rate_figures("tflops_forward", prim.flops_forward / 1e12, fwd_times),
    }
    if prim.bytes_forward:
        own.update(rate_figures("bandwidth_gbs", prim.bytes_forward / 1e9, fwd_times))
    if backward:
        own.update(rate_figures("tflops_backward", prim.flops_backward / 1e12, bwd_times))
    summed = sum_figures(session.gather(own))
    total = summed["tflops"] * 1e12  # FLOP/s, all ranks
    results: dict[str, Any] = {
        **summed,
        "tflops_per_device": total / session.world_size / 1e12,
        "mfu": session.mfu(total),
        "flops_per_step": float(flops_step),
        "flops_forward": float(prim.flops_forward),
        "forward_time_p50_s": session.max_all(percentile(fwd_times, 50)),
    }
    if backward:
        results.update({
            "flops_backward": float(prim.flops_backward),
            "backward_time_p50_s": session.max_all(percentile(bwd_times, 50)),
        })
    for name, count in prim.alt_forward_flops.items():
        # The same timings, another count of the same work: every rate scales by the ratio.
        ratio = count / prim.flops_forward
        results[f"flops_forward_{name}"] = float(count)
        results[f"flops_per_step_{name}"] = float(flops_step * ratio)
        results[f"tflops_{name}"] = summed["tflops"] * ratio
        results[f"tflops_forward_{name}"] = summed["tflops_forward"] * ratio
    results.update(prim.extra)
    timing_extra = {"forward_times_s": session.slowest_steps(fwd_times)}
    if backward:
        timing_extra["backward_times_s"] = session.slowest_steps(bwd_times)
    session.finish(results, times, timing_extra=timing_extra)
