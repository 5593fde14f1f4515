"""Shared timing of the DL primitives (conv2d, relu, lstm): forward, and backward on request.

Without ``--backward`` the forward runs under ``torch.inference_mode`` (no autograd
bookkeeping) and is the step. With it, each step is forward then backward (the
gradient of the output is a fixed random tensor), timed separately; the step
time is their sum. Each rank runs its own primitive; TFLOP/s are summed over
ranks as for the GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from workloads.harness import Refused, Session
from workloads.harness.timing import IntervalClock, percentile


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
    alt_forward_flops: dict[str, int] = field(default_factory=dict)


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
    own = flops_step / percentile(times, 50)
    total = session.sum_all(own)
    p50_fwd = session.max_all(percentile(fwd_times, 50))
    results: dict[str, Any] = {
        "tflops": total / 1e12,
        "tflops_per_device": total / session.world_size / 1e12,
        "mfu": session.mfu(total),
        "samples_per_s": session.sum_all(prim.batch / percentile(times, 50)),
        "flops_per_step": float(flops_step),
        "flops_forward": float(prim.flops_forward),
        "forward_time_p50_s": p50_fwd,
        "tflops_forward": prim.flops_forward / p50_fwd / 1e12,
    }
    if prim.bytes_forward:
        results["bandwidth_gbs"] = prim.bytes_forward / p50_fwd / 1e9
    if backward:
        p50_bwd = session.max_all(percentile(bwd_times, 50))
        results.update({
            "flops_backward": float(prim.flops_backward),
            "backward_time_p50_s": p50_bwd,
            "tflops_backward": prim.flops_backward / p50_bwd / 1e12,
        })
    for name, count in prim.alt_forward_flops.items():
        ratio = count / prim.flops_forward
        results[f"flops_forward_{name}"] = float(count)
        results[f"tflops_{name}"] = results["tflops"] * ratio
        results[f"tflops_forward_{name}"] = results["tflops_forward"] * ratio
    results.update(prim.extra)
    timing_extra = {"forward_times_s": session.slowest_steps(fwd_times)}
    if backward:
        timing_extra["backward_times_s"] = session.slowest_steps(bwd_times)
    session.finish(results, times, timing_extra=timing_extra)
