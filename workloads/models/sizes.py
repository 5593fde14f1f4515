"""Sizes of the AI-testbed study's models (study C), as plain data (no torch).

The registry offers these names as each workload's ``--size`` and sizes memory from them;
the models in this package build from them; ``workloads/flops.py`` counts their FLOPs.
``full`` is the benchmark's real shape, ``tiny`` a shape that runs in a second on a CPU
(for tests and for the examples' ``tiny`` variants).

| workload     | full                                                                  | source of the shape            |
|--------------|-----------------------------------------------------------------------|--------------------------------|
| unet         | 3 -> 1 channel, 256x256, base 64, depth 4 (64..1024 channels), 31M    | Ronneberger et al. 2015, padded |
| resnet50     | bottlenecks (3,4,6,3), base 64, 224x224, 1000 classes, 25.6M          | He et al. 2016 (v1.5 strides)   |
| bert (large) | 24 layers, hidden 1024, 16 heads, vocabulary 30522, 512 positions     | Devlin et al. 2019              |
| distilbert   | 6 layers, hidden 768, 12 heads, vocabulary 30522, 2 labels            | Sanh et al. 2019                |
| braggnn      | 11x11 patch, conv 64/32/8 + non-local block, dense 64/32/16/8 -> 2    | Liu et al. 2022 (BraggNN)       |
| candle_uno   | rnaseq 942, descriptors 5270, fingerprints 2048; 3x1000 per feature,  | CANDLE Pilot1 Uno defaults      |
|              | 3x1000 dense, one drug (dose + features), growth as output            |                                 |
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UNetConfig:
    in_channels: int = 3
    classes: int = 1
    base: int = 64  # channels of the first level; doubled at every level down
    depth: int = 4  # down-sampling steps (the bottom level has base * 2**depth channels)
    image: int = 256  # default input side (square); must be a multiple of 2**depth


@dataclass(frozen=True)
class ResNetConfig:
    layers: tuple[int, ...] = (3, 4, 6, 3)  # bottleneck blocks per stage
    base: int = 64  # width of the first stage; doubled every stage; outputs are 4x the width
    classes: int = 1000
    image: int = 224
    in_channels: int = 3


@dataclass(frozen=True)
class BertConfig:
    n_layer: int = 24
    n_head: int = 16
    n_embd: int = 1024  # the feed-forward layer is 4x this, as in every BERT here
    vocab_size: int = 30522
    max_positions: int = 512
    type_vocab_size: int = 2  # segment embeddings (0: none, as in DistilBERT)
    num_labels: int = 2  # classification head of DistilBERT


@dataclass(frozen=True)
class BraggNNConfig:
    patch: int = 11  # side of the square detector patch around one peak
    channels: tuple[int, ...] = (64, 32, 8)  # 3x3 convolutions (unpadded); non-local block after the first
    dense: tuple[int, ...] = (64, 32, 16, 8)  # then a linear layer to the 2 outputs (peak centre x, y)


@dataclass(frozen=True)
class UnoConfig:
    cell_features: int = 942  # RNA-seq of the landmark genes
    drug_descriptors: int = 5270  # Dragon7 descriptors
    drug_fingerprints: int = 2048
    feature_layers: tuple[int, ...] = (1000, 1000, 1000)  # one sub-network per feature type
    dense_layers: tuple[int, ...] = (1000, 1000, 1000)  # on the concatenated embeddings and dose(s)
    drugs: int = 1  # single-drug response (2: drug pairs, as for ALMANAC)


UNET_SIZES: dict[str, UNetConfig] = {
    "tiny": UNetConfig(base=4, depth=2, image=32),
    "full": UNetConfig(),
}
RESNET_SIZES: dict[str, ResNetConfig] = {
    "tiny": ResNetConfig(layers=(1, 1, 1, 1), base=4, classes=10, image=32),
    "full": ResNetConfig(),
}
BERT_SIZES: dict[str, BertConfig] = {
    "tiny": BertConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=1000),
    "base": BertConfig(n_layer=12, n_head=12, n_embd=768),
    "large": BertConfig(),
}
DISTILBERT_SIZES: dict[str, BertConfig] = {
    "tiny": BertConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=1000, type_vocab_size=0),
    "full": BertConfig(n_layer=6, n_head=12, n_embd=768, type_vocab_size=0),
}
BRAGGNN_SIZES: dict[str, BraggNNConfig] = {
    "tiny": BraggNNConfig(channels=(16, 8, 4), dense=(16, 8)),
    "full": BraggNNConfig(),
}
UNO_SIZES: dict[str, UnoConfig] = {
    "tiny": UnoConfig(cell_features=32, drug_descriptors=64, drug_fingerprints=32, feature_layers=(32, 32),
                      dense_layers=(32, 32)),
    "full": UnoConfig(),
}


def bert_params(cfg: BertConfig, *, pretraining_heads: bool = True) -> int:
    """Parameters of a BERT: embeddings (+ their LayerNorm), layers of 12h^2 + 13h, and heads.

    Pre-training heads: pooler (h^2 + h), NSP classifier (2h + 2), MLM transform
    (h^2 + h + 2h) and decoder bias V (its weight is the tied word embedding).
    Without them: DistilBERT's classifier, pre-classifier (h^2 + h) and classifier (h*labels + labels).
    """
    h, v = cfg.n_embd, cfg.vocab_size
    total = (v + cfg.max_positions + cfg.type_vocab_size) * h + 2 * h
    total += cfg.n_layer * (12 * h * h + 13 * h)
    if pretraining_heads:
        total += (h * h + h) + (2 * h + 2) + (h * h + h + 2 * h) + v
    else:
        total += (h * h + h) + (h * cfg.num_labels + cfg.num_labels)
    return total
