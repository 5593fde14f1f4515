"""BERT pre-training (study C.2: BERT-Large, sequence 128, global batch 256) on synthetic tokens.

The model is ``workloads/models/bert.py`` (size ``large``: 24 layers, hidden 1024, 16
heads, 336M parameters with the pre-training heads). A sample is one sequence pair: random token ids, segment ids
(first half sentence A, second half B), ``--max-predictions`` masked positions (20 at
sequence 128, as BERT's recipe) with random labels, and a random next-sentence label. Loss:
masked-LM cross-entropy over the masked positions only + next-sentence cross-entropy;
optimiser AdamW. The global batch is batch_size x grad_accum x ranks (256 = 32 x 8 x 1 =
32 x 1 x 8). FLOPs per sequence: ``workloads.flops.bert_pretraining_forward`` x 3.
"""

from __future__ import annotations

from typing import Sequence

import torch

from workloads import flops, modelbench
from workloads.harness import Refused, Session, run_workload
from workloads.models.bert import BertForPreTraining, pretraining_loss
from workloads.models.sizes import BERT_SIZES


def body(session: Session) -> None:
    args = session.args
    cfg = BERT_SIZES[args.size]
    b, s = args.batch_size, args.seq_len
    if not 2 <= s <= cfg.max_positions:
        raise Refused(f"sequence length {s} must be within 2..{cfg.max_positions} (the position table)")
    predictions = max(1, min(args.max_predictions, s - 1))
    v = cfg.vocab_size

    def make_batch(gen: torch.Generator, device: torch.device) -> modelbench.Batch:
        ids = torch.randint(0, v, (b, s), generator=gen)
        segments = (torch.arange(s) >= s // 2).long().expand(b, s).contiguous()
        # Masked positions: distinct, never [CLS] at 0.
        positions = torch.stack([torch.randperm(s - 1, generator=gen)[:predictions] + 1 for _ in range(b)])
        mlm_labels = torch.randint(0, v, (b, predictions), generator=gen)
        nsp_labels = torch.randint(0, 2, (b,), generator=gen)
        inputs = tuple(t.to(device) for t in (ids, segments, positions))
        return inputs, (mlm_labels.to(device), nsp_labels.to(device))

    bench = modelbench.Bench(
        model=BertForPreTraining(cfg), make_batch=make_batch, loss=pretraining_loss, batch_size=b,
        flops_forward_per_sample=flops.bert_pretraining_forward(1, s, cfg.n_embd, cfg.n_layer, v, predictions),
        tokens_per_sample=s, extra={"max_predictions": predictions})
    modelbench.run(session, bench, "train", grad_accum=args.grad_accum)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("bert", body, argv, training=True)


if __name__ == "__main__":
    raise SystemExit(main())
