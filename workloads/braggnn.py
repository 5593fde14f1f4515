"""BraggNN (study C.3: batch 512/1024/2048): Bragg-peak centres from 11x11 detector patches.

The model is ``workloads/models/braggnn.py`` (size ``full``: convolutions 64/32/8 with a
non-local block, dense 64/32/16/8 -> 2; 45k parameters). The patches are synthetic: a
Gaussian peak at a random sub-pixel centre plus noise, the target that centre scaled to
[0, 1] (what the real model learns from); loss mean squared error, optimiser AdamW. The
loop, DDP and the metrics are ``workloads/modelbench.py``'s. FLOPs per patch:
``workloads.flops.braggnn_forward`` (4.2 MFLOP; training 3 x forward).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.nn import functional as F

from workloads import flops, modelbench
from workloads.harness import Session, run_workload
from workloads.models.braggnn import BraggNN
from workloads.models.sizes import BRAGGNN_SIZES


def peaks(batch: int, patch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` patches (b, 1, patch, patch) with one Gaussian peak each, and the centres (b, 2) in [0, 1]."""
    centre = 0.25 + 0.5 * torch.rand(batch, 2, generator=gen)  # keep the peak inside the patch
    width = 0.8 + 0.8 * torch.rand(batch, 1, 1, generator=gen)  # pixels
    grid = torch.arange(patch, dtype=torch.float32)
    cy = centre[:, 0, None, None] * (patch - 1)
    cx = centre[:, 1, None, None] * (patch - 1)
    image = torch.exp(-((grid[None, :, None] - cy) ** 2 + (grid[None, None, :] - cx) ** 2) / (2 * width**2))
    image = image + 0.02 * torch.randn(batch, patch, patch, generator=gen)
    return image.unsqueeze(1), centre


def body(session: Session) -> None:
    args = session.args
    cfg = BRAGGNN_SIZES[args.size]
    b = args.batch_size

    def make_batch(gen: torch.Generator, device: torch.device) -> modelbench.Batch:
        images, centres = peaks(b, cfg.patch, gen)
        return (images.to(device),), centres.to(device)

    def loss(out: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.float(), centres.float())

    bench = modelbench.Bench(
        model=BraggNN(cfg), make_batch=make_batch, loss=loss, batch_size=b, lr=1e-3,
        flops_forward_per_sample=flops.braggnn_forward(cfg.patch, cfg.channels, cfg.dense))
    modelbench.run(session, bench, args.mode)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("braggnn", body, argv, training=True)


if __name__ == "__main__":
    raise SystemExit(main())
