"""ReLU over a (b, c, h, w) tensor (DeepBench shapes): a memory-bound primitive.

FLOPs (perf-model.md): w*h*c*b, one per element, forward; backward counted the
same (one select per element). ``bandwidth_gbs``: bytes read plus written by the
forward (2 x elements x element size) x timed steps / summed forward time
(``bandwidth_gbs_median`` at the median forward time). The other figures and every
rate's definition: ``workloads/primitives.py``, ``db/glossary_metrics.yaml``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from workloads import flops, shapes
from workloads.harness import Session, run_workload
from workloads.primitives import Primitive, run


def body(session: Session) -> None:
    args = session.args
    d = shapes.resolve(shapes.RELU, args.shape, {"w": args.width, "h": args.height, "c": args.channels,
                                                 "b": args.batch_size})
    dev, dtype = session.device.torch_device, session.precision.dtype
    x = torch.randn(d["b"], d["c"], d["h"], d["w"], device=dev, dtype=dtype)
    count = flops.relu(d["w"], d["h"], d["c"], d["b"])
    if args.backward:
        x.requires_grad_(True)
        forward = lambda: torch.relu(x)  # noqa: E731  (autograd needs the functional form)
    else:
        out = torch.empty_like(x)
        # clamp_min(x, 0) is ReLU; its out= form writes into a fixed buffer, so the step is the
        # elementwise pass alone, not an allocation too.
        forward = lambda: torch.clamp_min(x, 0, out=out)  # noqa: E731
    prim = Primitive(forward=forward, flops_forward=count, flops_backward=count, batch=d["b"],
                     bytes_forward=2 * x.numel() * x.element_size(), grads=[x])
    session.log(f"relu {d}")
    run(session, "relu", prim, args.backward)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("relu", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
