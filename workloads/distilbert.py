"""DistilBERT sequence-classification inference latency (study C.2: batch 1), synthetic tokens.

The model is ``workloads/models/bert.py``'s DistilBERT (size ``full``: 6 layers, hidden
768, 12 heads, 2 labels, 66M parameters), in eval mode under ``torch.inference_mode``,
weights in the precision's dtype. A step is one batch (default: one sequence of 128
tokens) -> logits; its time is the latency (``latency_p50_s``, ``latency_p90_s``). FLOPs per
sequence: ``workloads.flops.distilbert_classify_forward``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from workloads import flops, modelbench
from workloads.harness import Refused, Session, run_workload
from workloads.models.bert import DistilBertForSequenceClassification
from workloads.models.sizes import DISTILBERT_SIZES


def body(session: Session) -> None:
    args = session.args
    cfg = DISTILBERT_SIZES[args.size]
    b, s = args.batch_size, args.seq_len
    if not 1 <= s <= cfg.max_positions:
        raise Refused(f"sequence length {s} must be within 1..{cfg.max_positions} (the position table)")

    def make_batch(gen: torch.Generator, device: torch.device) -> modelbench.Batch:
        return (torch.randint(0, cfg.vocab_size, (b, s), generator=gen).to(device),), None

    bench = modelbench.Bench(
        model=DistilBertForSequenceClassification(cfg), make_batch=make_batch,
        loss=lambda out, target: out.float().sum(),  # not used: inference only
        batch_size=b, tokens_per_sample=s,
        flops_forward_per_sample=flops.distilbert_classify_forward(1, s, cfg.n_embd, cfg.n_layer, cfg.num_labels))
    modelbench.run(session, bench, "inference")


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("distilbert", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
