"""CANDLE Uno (study C.3): drug response (tumour growth) from cell and drug features, synthetic.

The model is ``workloads/models/uno.py`` (size ``full``: Uno's defaults, landmark-gene
RNA-seq 942, Dragon7 descriptors 5270, fingerprints 2048, sub-networks of 3 x 1000 per
feature type, dense 3 x 1000; 19.3M parameters for one drug). The features are random
(standardised expression and descriptors, binary fingerprints, doses in [0, 1]) and so is
the growth target; loss mean squared error, optimiser AdamW. The loop, DDP and the metrics
are ``workloads/modelbench.py``'s. FLOPs per sample: ``workloads.flops.uno_forward``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch
from torch.nn import functional as F

from workloads import flops, modelbench
from workloads.harness import Session, run_workload
from workloads.models.sizes import UNO_SIZES
from workloads.models.uno import Uno


def body(session: Session) -> None:
    args = session.args
    cfg = replace(UNO_SIZES[args.size], drugs=args.drugs)
    b, d = args.batch_size, cfg.drugs

    def make_batch(gen: torch.Generator, device: torch.device) -> modelbench.Batch:
        cell = torch.randn(b, cfg.cell_features, generator=gen)
        doses = torch.rand(b, d, generator=gen)
        descriptors = torch.randn(b, d, cfg.drug_descriptors, generator=gen)
        fingerprints = (torch.rand(b, d, cfg.drug_fingerprints, generator=gen) > 0.5).float()
        growth = torch.randn(b, generator=gen)
        inputs = tuple(t.to(device) for t in (cell, doses, descriptors, fingerprints))
        return inputs, growth.to(device)

    def loss(out: torch.Tensor, growth: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.float(), growth.float())

    bench = modelbench.Bench(
        model=Uno(cfg), make_batch=make_batch, loss=loss, batch_size=b,
        flops_forward_per_sample=flops.uno_forward(cfg.cell_features, cfg.drug_descriptors, cfg.drug_fingerprints,
                                                   cfg.feature_layers, cfg.dense_layers, cfg.drugs))
    modelbench.run(session, bench, args.mode)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("candle_uno", body, argv, training=True)


if __name__ == "__main__":
    raise SystemExit(main())
