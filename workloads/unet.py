"""U-Net segmentation (study C.2: U-Net on 256x256 images) on synthetic images and masks.

The model is ``workloads/models/unet.py`` (size ``full``: 3 -> 1 channel, base 64, depth 4,
31M parameters). Training: per-pixel binary cross-entropy against random binary masks,
AdamW; inference: one batch of images -> logits. The loop, DDP and the metrics are
``workloads/modelbench.py``'s. FLOPs per image: ``workloads.flops.unet_forward`` (every
convolution's multiply-adds x 2; training 3 x forward).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.nn import functional as F

from workloads import flops, modelbench
from workloads.harness import Refused, Session, run_workload
from workloads.models.sizes import UNET_SIZES
from workloads.models.unet import UNet


def body(session: Session) -> None:
    args = session.args
    cfg = UNET_SIZES[args.size]
    side = args.image_size or cfg.image
    if side < 1 or side % 2 ** cfg.depth:
        raise Refused(f"image side {side} must be a positive multiple of 2**{cfg.depth} (the pooling depth)")
    b = args.batch_size

    def make_batch(gen: torch.Generator, device: torch.device) -> modelbench.Batch:
        images = torch.randn(b, cfg.in_channels, side, side, generator=gen)
        masks = (torch.rand(b, cfg.classes, side, side, generator=gen) > 0.5).float()
        return (images.to(device),), masks.to(device)

    def loss(logits: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(logits.float(), masks.float())

    bench = modelbench.Bench(
        model=UNet(cfg), make_batch=make_batch, loss=loss, batch_size=b,
        flops_forward_per_sample=flops.unet_forward(side, cfg.in_channels, cfg.classes, cfg.base, cfg.depth),
        channels_last=args.channels_last, extra={"image_size": side})
    modelbench.run(session, bench, args.mode)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("unet", body, argv, training=True)


if __name__ == "__main__":
    raise SystemExit(main())
