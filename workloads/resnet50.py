"""ResNet-50 image classification, training or inference (study C.2), on synthetic images.

The model is ``workloads/models/resnet.py`` (size ``full``: 25.6M parameters, 224x224,
1000 classes). Training: cross-entropy against random labels, SGD with momentum (as
ResNet is trained); inference: one batch of images -> logits, under
``torch.inference_mode`` with the weights in the precision's dtype. The loop, DDP and the
metrics are ``workloads/modelbench.py``'s. FLOPs per image: ``workloads.flops.resnet_forward``
(8.18 GFLOP at 224x224, i.e. the usual "4.1 GMAC"; training 3 x forward).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.nn import functional as F

from workloads import flops, modelbench
from workloads.harness import Refused, Session, run_workload
from workloads.models.resnet import ResNet
from workloads.models.sizes import RESNET_SIZES


def body(session: Session) -> None:
    args = session.args
    cfg = RESNET_SIZES[args.size]
    side = args.image_size or cfg.image
    if side < 32:
        raise Refused(f"image side {side} is too small for five stride-2 reductions (at least 32)")
    b = args.batch_size

    def make_batch(gen: torch.Generator, device: torch.device) -> modelbench.Batch:
        images = torch.randn(b, cfg.in_channels, side, side, generator=gen)
        labels = torch.randint(0, cfg.classes, (b,), generator=gen)
        return (images.to(device),), labels.to(device)

    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels)

    bench = modelbench.Bench(
        model=ResNet(cfg), make_batch=make_batch, loss=loss, batch_size=b, optimizer="sgd", lr=0.1,
        flops_forward_per_sample=flops.resnet_forward(side, cfg.layers, cfg.base, cfg.classes, cfg.in_channels),
        channels_last=args.channels_last, extra={"image_size": side})
    modelbench.run(session, bench, args.mode)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("resnet50", body, argv, training=True)


if __name__ == "__main__":
    raise SystemExit(main())
