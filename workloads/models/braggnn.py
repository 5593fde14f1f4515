"""BraggNN (Liu et al. 2022, IUCrJ): the centre of a Bragg peak from an 11x11 detector patch.

patch (1 channel) -> 3x3 conv (64) -> non-local block -> LeakyReLU -> 3x3 conv (32) ->
LeakyReLU -> 3x3 conv (8) -> LeakyReLU -> flatten (8*5*5) -> dense 64, 32, 16, 8 (LeakyReLU)
-> 2 (the peak centre, x and y, scaled to [0, 1]). The convolutions are unpadded.
Non-local block (Wang et al. 2018): 1x1 projections theta, phi, g to c/2 channels,
softmax(theta^T phi) over the n = side^2 positions applied to g, 1x1 back to c, plus x.
FLOPs: ``workloads.flops.braggnn_forward``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from workloads.models.sizes import BraggNNConfig

SLOPE = 0.01  # LeakyReLU negative slope


class NonLocalBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        inner = channels // 2
        self.theta = nn.Conv2d(channels, inner, 1)
        self.phi = nn.Conv2d(channels, inner, 1)
        self.g = nn.Conv2d(channels, inner, 1)
        self.out = nn.Conv2d(inner, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        theta = self.theta(x).flatten(2).transpose(1, 2)  # (b, n, inner)
        phi = self.phi(x).flatten(2)  # (b, inner, n)
        g = self.g(x).flatten(2).transpose(1, 2)  # (b, n, inner)
        attention = torch.softmax(theta @ phi, dim=-1)  # (b, n, n)
        y = (attention @ g).transpose(1, 2).reshape(b, -1, h, w)
        return x + self.out(y)


class BraggNN(nn.Module):
    def __init__(self, cfg: BraggNNConfig) -> None:
        super().__init__()
        chans = (1, *cfg.channels)
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3) for a, b in zip(chans, chans[1:]))
        self.nlb = NonLocalBlock(cfg.channels[0])
        side = cfg.patch - 2 * len(cfg.channels)
        dims = (cfg.channels[-1] * side * side, *cfg.dense)
        dense: list[nn.Module] = []
        for a, b in zip(dims, dims[1:]):
            dense += [nn.Linear(a, b), nn.LeakyReLU(SLOPE)]
        self.dense = nn.Sequential(*dense, nn.Linear(dims[-1], 2))
        self.act = nn.LeakyReLU(SLOPE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.nlb(self.convs[0](x)))
        for conv in self.convs[1:]:
            x = self.act(conv(x))
        return self.dense(x.flatten(1))
