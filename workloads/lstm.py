"""LSTM over a sequence (DeepBench shapes), ``torch.nn.LSTM`` (cuDNN/MIOpen where present).

FLOPs: the study's count per layer 2*4*s*i*h*b + 2*4*s*h*b is ``tflops``;
``tflops_full`` also counts the recurrent product in full, 2*4*s*b*h*(i+h) per
layer. Backward counted as 2 x forward. ``flops_forward_full``, ``flops_per_step_full``
and ``tflops_forward_full`` are the full count's; the other figures and every rate's
definition (total work over total timed time): ``workloads/primitives.py``,
``db/glossary_metrics.yaml``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from workloads import flops, shapes
from workloads.harness import Session, run_workload
from workloads.primitives import Primitive, run


def body(session: Session) -> None:
    args = session.args
    d = shapes.resolve(shapes.LSTM, args.shape, {"s": args.seq_len, "b": args.batch_size,
                                                 "i": args.input_size, "h": args.hidden_size})
    dev, dtype = session.device.torch_device, session.precision.dtype
    layers = max(1, args.layers)
    lstm = torch.nn.LSTM(d["i"], d["h"], num_layers=layers).to(device=dev, dtype=dtype)
    x = torch.randn(d["s"], d["b"], d["i"], device=dev, dtype=dtype, requires_grad=args.backward)
    study = flops.lstm(d["s"], d["b"], d["i"], d["h"], layers)
    full = flops.lstm_full(d["s"], d["b"], d["i"], d["h"], layers)
    prim = Primitive(
        forward=lambda: lstm(x)[0],
        flops_forward=study,
        flops_backward=flops.BACKWARD_FACTOR * study,
        batch=d["b"],
        grads=[x, *lstm.parameters()],
        alt_forward_flops={"full": full},
    )
    session.log(f"lstm {d} layers={layers}")
    run(session, "lstm", prim, args.backward)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("lstm", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
