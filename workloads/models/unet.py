"""U-Net for image segmentation in plain PyTorch (Ronneberger et al. 2015), readable top to bottom.

image -> [DoubleConv] -> down x depth -> up x depth -> 1x1 conv -> per-pixel logits
DoubleConv: (3x3 conv, padded -> BatchNorm -> ReLU) twice, so only pooling changes the size.
Down: 2x2 max-pooling, then DoubleConv doubling the channels.
Up: 2x2 stride-2 transposed convolution halving the channels, concatenation with the
encoder's output of the same level (the skip connection), then DoubleConv.
FLOPs: ``workloads.flops.unet_forward`` walks exactly this structure.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from workloads.models.sizes import UNetConfig


class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        )


class Up(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, kernel_size=2, stride=2)
        self.conv = DoubleConv(2 * cout, cout)  # after concatenating the skip connection

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    def __init__(self, cfg: UNetConfig) -> None:
        super().__init__()
        widths = [cfg.base * 2 ** i for i in range(cfg.depth + 1)]  # e.g. 64, 128, 256, 512, 1024
        self.inc = DoubleConv(cfg.in_channels, widths[0])
        self.downs = nn.ModuleList(nn.Sequential(nn.MaxPool2d(2), DoubleConv(a, b))
                                   for a, b in zip(widths, widths[1:]))
        self.ups = nn.ModuleList(Up(b, a) for a, b in reversed(list(zip(widths, widths[1:]))))
        self.outc = nn.Conv2d(widths[0], cfg.classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(skips[-1]))
        x = skips.pop()  # the bottom of the U
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)
