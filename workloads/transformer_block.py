"""One transformer layer (the GPT-2 XL block by default), forward and backward timed separately.

The block is ``workloads/models/gpt.py``'s ``Block`` (pre-norm, SDPA attention,
GELU MLP). Per step: forward on a (batch, seq, hidden) input, then backward
from a fixed random output gradient. FLOPs: forward b*s*(2*N_layer + 4*h*s),
backward twice that (``workloads/flops.py``). fp16/bf16 run under autocast with
fp32 weights, as mixed-precision training does.

Figures (study A.1: tokens/s and TFLOP/s, forward and backward separately; definitions
in ``db/glossary_metrics.yaml``). Per step the slowest rank's forward, backward and
their sum; n timed steps; T, T_fwd, T_bwd their summed times (T = ``timed_time_s``):

- ``tokens_per_s`` = b x s x ranks x n / T; ``samples_per_s`` = b x ranks x n / T;
  ``tflops`` = (flops_forward + flops_backward) x ranks x n / T / 1e12;
  ``tflops_per_device`` = tflops / ranks; ``mfu`` = tflops / (ranks x --peak-tflops).
- ``forward_tokens_per_s``, ``tflops_forward`` the same over T_fwd with the forward's
  FLOPs; ``backward_tokens_per_s``, ``tflops_backward`` over T_bwd.
- Each rate's ``<name>_median`` is the same work over the median (step, forward or
  backward) time; ``forward_time_p50_s``, ``backward_time_p50_s`` those medians.
"""

from __future__ import annotations

from typing import Sequence

import torch

from workloads import flops
from workloads.harness import Refused, Session, run_workload
from workloads.harness.timing import IntervalClock, percentile, rate, rate_figures
from workloads.models.configs import GPTConfig
from workloads.models.gpt import Block


def body(session: Session) -> None:
    args = session.args
    b, s, h = args.batch_size, args.seq_len, args.hidden
    if h % args.heads:
        raise Refused(f"hidden {h} is not divisible by {args.heads} heads")
    dev = session.device
    block = Block(GPTConfig(n_layer=1, n_head=args.heads, n_embd=h)).to(dev.torch_device)
    x = torch.randn(b, s, h, device=dev.torch_device, requires_grad=args.backward)
    half = session.precision.dtype if session.precision.dtype in (torch.float16, torch.bfloat16) else None

    def forward() -> torch.Tensor:
        if half is None:
            return block(x, args.causal)
        with torch.autocast(device_type=dev.type, dtype=half):
            return block(x, args.causal)

    grad_out = torch.randn(b, s, h, device=dev.torch_device)
    clock = IntervalClock(dev)

    def one(timed: bool) -> None:
        if timed:
            clock.begin("fwd")
        if args.backward:
            out = forward()
        else:
            with torch.inference_mode():
                out = forward()
        if timed:
            clock.end("fwd")
        if args.backward:
            if timed:
                clock.begin("bwd")
            out.backward(grad_out.to(out.dtype))
            if timed:
                clock.end("bwd")
            x.grad = None
            block.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        one(False)
    session.barrier()
    with session.metering():  # energy over the timed steps, which this loop times itself
        for _ in range(args.iters):
            one(True)
    fwd = clock.times("fwd")
    bwd = clock.times("bwd") if args.backward else [0.0] * len(fwd)
    steps = [f + g for f, g in zip(fwd, bwd)]

    f_fwd = flops.transformer_block_forward(b, s, h)
    f_bwd = flops.transformer_block_backward(b, s, h) if args.backward else 0
    fwd_g, bwd_g, steps_g = session.slowest_steps(fwd), session.slowest_steps(bwd), session.slowest_steps(steps)
    tokens = b * s * session.world_size
    ranks = session.world_size
    total = rate((f_fwd + f_bwd) * ranks, steps_g).total  # FLOP/s, all ranks
    results = {
        **rate_figures("tokens_per_s", tokens, steps_g),
        **rate_figures("samples_per_s", b * ranks, steps_g),
        **rate_figures("tflops", (f_fwd + f_bwd) * ranks / 1e12, steps_g),
        "tflops_per_device": total / ranks / 1e12,
        "mfu": session.mfu(total),
        "forward_time_p50_s": percentile(fwd_g, 50),
        **rate_figures("forward_tokens_per_s", tokens, fwd_g),
        **rate_figures("tflops_forward", f_fwd * ranks / 1e12, fwd_g),
        "flops_forward": f_fwd,
        "flops_backward": f_bwd,
        "layer_params": flops.transformer_layer_params(h),
    }
    if args.backward:
        results.update({
            "backward_time_p50_s": percentile(bwd_g, 50),
            **rate_figures("backward_tokens_per_s", tokens, bwd_g),
            **rate_figures("tflops_backward", f_bwd * ranks / 1e12, bwd_g),
        })
    session.finish(results, steps_g, already_gathered=True,
                   timing_extra={"forward_times_s": fwd_g, "backward_times_s": bwd_g if args.backward else []})


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("transformer_block", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
