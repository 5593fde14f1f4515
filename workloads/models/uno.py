"""CANDLE Uno (Pilot1 drug response) in plain PyTorch: tumour growth from cell and drug features.

cell RNA-seq ------------> cell sub-network -------\
drug descriptors --------> descriptor sub-network --+-- concat with dose -> dense layers -> growth
drug fingerprints -------> fingerprint sub-network -/
Each sub-network is a stack of ReLU linear layers (1000, 1000, 1000 by default), shared by
every drug of a sample; the dense layers are ReLU linears down to one linear output,
trained with the mean squared error. FLOPs: ``workloads.flops.uno_forward``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from workloads.models.sizes import UnoConfig


def relu_mlp(dims: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(dims, dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class Uno(nn.Module):
    def __init__(self, cfg: UnoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.cell = relu_mlp((cfg.cell_features, *cfg.feature_layers))
        self.descriptors = relu_mlp((cfg.drug_descriptors, *cfg.feature_layers))
        self.fingerprints = relu_mlp((cfg.drug_fingerprints, *cfg.feature_layers))
        width = cfg.drugs + cfg.feature_layers[-1] * (1 + 2 * cfg.drugs)
        self.dense = relu_mlp((width, *cfg.dense_layers))
        self.out = nn.Linear(cfg.dense_layers[-1], 1)

    def forward(self, cell: torch.Tensor, doses: torch.Tensor, descriptors: torch.Tensor,
                fingerprints: torch.Tensor) -> torch.Tensor:
        """cell (b, genes); doses (b, drugs); descriptors (b, drugs, d); fingerprints (b, drugs, f)."""
        parts = [doses, self.cell(cell)]
        for i in range(self.cfg.drugs):
            parts += [self.descriptors(descriptors[:, i]), self.fingerprints(fingerprints[:, i])]
        return self.out(self.dense(torch.cat(parts, dim=1))).squeeze(1)
