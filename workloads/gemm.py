"""Dense matrix product C = A @ B, A (M,K), B (K,N): the DeepBench GEMM kernel.

FLOPs per product: 2*M*N*K (one multiply and one add per term). With several
ranks each rank times its own product on its own device after a barrier, and
the ranks' rates are summed (their products are independent, so the machine's
rate is the sum of its devices'); the step times in the metrics file are the
slowest rank's per step.

Figures (definitions: ``db/glossary_metrics.yaml``; study C.1 DeepBench GEMM):

- ``tflops`` = sum over ranks of flops_per_step x n / T_r / 1e12, T_r a rank's summed
  timed-step time, n the timed steps (DeepBench averages its timed repeats, i.e.
  total work over total time); ``tflops_median`` = sum over ranks of
  flops_per_step / (that rank's median step time) / 1e12.
- ``tflops_per_device`` = tflops / ranks; ``mfu`` = tflops / (ranks x --peak-tflops).
- ``flops_per_step`` = 2*M*N*K; ``bytes_per_step`` = bytes of A, B and C touched once.

``--min-time S`` times more steps than ``--iters`` until they add up to S seconds (every
rank the same count): a small shape's 100 steps can last 20 ms, which one interrupt moves.

fp8 uses ``torch._scaled_mm`` on e4m3 inputs (unit scales, bf16 output), which
needs M, N, K multiples of 16 and an fp8-capable device.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from workloads import flops
from workloads.harness import Refused, Session, run_workload
from workloads.harness.timing import rate_figures, sum_figures


def make_step(session: Session, m: int, n: int, k: int) -> Callable[[], Any]:
    """The timed operation, with operands allocated once (allocation is not what we measure)."""
    dev = session.device.torch_device
    prec = session.precision
    gen = torch.Generator(device="cpu").manual_seed(1234 + session.rank)
    if prec.name == "fp8":
        if m % 16 or n % 16 or k % 16:
            raise Refused(f"fp8 GEMM needs M, N, K multiples of 16; got {m}, {n}, {k}")
        # Cast before the copy to the device: cast there, the fp32 operand was the run's peak (0.40 GB
        # for 0.27 GB of operands and result at 8192^3 on the H200, 2026-11-27).
        a = torch.randn(m, k, generator=gen).to(prec.dtype).to(dev)
        # _scaled_mm wants B column-major: make it as (N,K) row-major and transpose the view.
        b = torch.randn(n, k, generator=gen).to(prec.dtype).to(dev).t()
        one = torch.ones((), device=dev, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, generator=gen).to(device=dev, dtype=prec.dtype)
    b = torch.randn(k, n, generator=gen).to(device=dev, dtype=prec.dtype)
    c = torch.empty(m, n, device=dev, dtype=prec.dtype)
    # out= reuses C: the step is the product alone, no allocator traffic.
    return lambda: torch.matmul(a, b, out=c)


def body(session: Session) -> None:
    args = session.args
    m, n, k = args.m, args.n, args.k
    if min(m, n, k) < 1:
        raise Refused(f"M, N, K must be positive; got {m}, {n}, {k}")
    if not 0 <= args.min_time <= 3600:
        raise Refused(f"--min-time {args.min_time}: expected 0 to 3600 seconds")
    step = make_step(session, m, n, k)
    work = flops.gemm(m, n, k)
    session.barrier()  # every rank starts timing together
    times = session.time_steps(step)
    # Each rank's own rate (total-based and median-based), summed over ranks.
    summed = sum_figures(session.gather(rate_figures("tflops", work / 1e12, times)))
    total = summed["tflops"] * 1e12  # FLOP/s, all ranks
    results = {
        **summed,
        "tflops_per_device": total / session.world_size / 1e12,
        "mfu": session.mfu(total),
        "flops_per_step": float(work),
        # Bytes of A, B and C touched once per product: the arithmetic intensity's denominator.
        "bytes_per_step": float((m * k + k * n) * session.precision.dtype.itemsize
                                + m * n * (2 if session.precision.name == "fp8" else session.precision.dtype.itemsize)),
    }
    session.finish(results, times)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("gemm", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
