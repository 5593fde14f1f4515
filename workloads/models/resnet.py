"""ResNet-50 (bottleneck ResNet, He et al. 2016) in plain PyTorch, as torchvision builds it (v1.5).

image -> 7x7/2 conv -> 3x3/2 max-pool -> 4 stages of bottlenecks -> average pool -> fc
Bottleneck: 1x1 (-> width) -> 3x3 (stride here, "v1.5") -> 1x1 (-> 4 x width), each
followed by BatchNorm, ReLU after the first two and after the residual sum; the first
block of a stage projects its input with a strided 1x1 convolution.
FLOPs: ``workloads.flops.resnet_forward`` walks exactly this structure.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from workloads.models.sizes import ResNetConfig

EXPANSION = 4


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * EXPANSION
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        nn.init.zeros_(self.bn3.weight)  # each block starts as the identity (common practice)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, cfg: ResNetConfig) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(cfg.in_channels, cfg.base, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(cfg.base), nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        blocks: list[nn.Module] = []
        cin = cfg.base
        for stage, count in enumerate(cfg.layers):
            width = cfg.base * 2 ** stage
            for i in range(count):
                blocks.append(Bottleneck(cin, width, stride=2 if stage > 0 and i == 0 else 1))
                cin = width * EXPANSION
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, cfg.classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))
