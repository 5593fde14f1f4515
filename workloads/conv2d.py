"""2-D convolution (DeepBench conv shapes): TFLOP/s of forward, and of backward on request.

FLOPs (perf-model.md): forward 2*Wo*Ho*k*c*fw*fh*b with Wo=(w+2pw-fw)/sw+1,
Ho=(h+2ph-fh)/sh+1 (the true output size); backward counted as 2 x forward (input and
weight gradients). Study C writes Wo=(w+2pw-fw)/sw, with no +1: its figures are kept
beside orch's at the same timings.

Figures (besides ``workloads/primitives.py``'s; ``db/glossary_metrics.yaml``):

- ``tflops``, ``flops_per_step``, ``flops_forward``: orch's exact count.
- ``tflops_study_c`` = tflops x flops_per_step_study_c / flops_per_step, i.e. the study's
  FLOPs x n / T (total-based, as DeepBench averages); ``flops_per_step_study_c`` and
  ``flops_forward_study_c``: the study's counts (``flops.conv2d_study_c``);
  ``tflops_forward_study_c`` the forward alone. On deepbench-0 (7x7, 3x3, no padding)
  tflops / tflops_study_c = 25/16 = 1.5625.
- ``out_w``, ``out_h``: the true output width and height.
"""

from __future__ import annotations

import argparse
from typing import Sequence

import torch
import torch.nn.functional as F

from workloads import flops, shapes
from workloads.harness import Session, run_workload
from workloads.primitives import Primitive, run


def dims(args: argparse.Namespace) -> dict[str, int]:
    d = shapes.resolve(shapes.CONV2D, args.shape, {
        "w": args.width, "h": args.height, "c": args.channels, "b": args.batch_size, "k": args.filters,
        "fw": args.filter_w, "fh": args.filter_h, "pw": args.pad_w, "ph": args.pad_h,
    })
    d["sw"], d["sh"] = max(1, args.stride_w), max(1, args.stride_h)
    return d


def body(session: Session) -> None:
    d = dims(session.args)
    dev, dtype = session.device.torch_device, session.precision.dtype
    backward = session.args.backward
    # NCHW tensors; channels_last lets cuDNN/MIOpen/oneDNN pick their tensor-core layouts.
    fmt = torch.channels_last if session.args.memory_format == "nhwc" else torch.contiguous_format
    x = torch.randn(d["b"], d["c"], d["h"], d["w"], device=dev, dtype=dtype).to(memory_format=fmt)
    weight = torch.randn(d["k"], d["c"], d["fh"], d["fw"], device=dev, dtype=dtype).to(memory_format=fmt)
    x.requires_grad_(backward)
    weight.requires_grad_(backward)
    shape = (d["w"], d["h"], d["c"], d["b"], d["k"], d["fw"], d["fh"], d["pw"], d["ph"], d["sw"], d["sh"])
    forward_flops = flops.conv2d(*shape)
    prim = Primitive(
        forward=lambda: F.conv2d(x, weight, stride=(d["sh"], d["sw"]), padding=(d["ph"], d["pw"])),
        flops_forward=forward_flops,
        flops_backward=flops.BACKWARD_FACTOR * forward_flops,
        batch=d["b"],
        grads=[x, weight],
        alt_forward_flops={"study_c": flops.conv2d_study_c(*shape)},
        extra={"out_w": flops.conv_out(d["w"], d["fw"], d["pw"], d["sw"]),
               "out_h": flops.conv_out(d["h"], d["fh"], d["ph"], d["sh"])},
    )
    session.log(f"conv2d {d}")
    run(session, "conv2d", prim, backward)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("conv2d", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
