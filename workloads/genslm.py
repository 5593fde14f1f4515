"""GenSLM science case: a GPT trained on codon-tokenised genomes.

DNA is read 3 bases per token (64 codons + 6 special tokens = vocabulary 70);
the genomes are synthetic, generated deterministically by
``workloads/data/genomes.py`` (no downloads), one genome of ``seq_len`` tokens
per sample, ``--num-sequences`` of them per epoch. The model and training loop
are the GPT-2 workload's (``workloads/models/gpt.py``, ``workloads/lm.py``) with
the vocabulary replaced; sequences 1024 .. 10240 tokens as in the study.
"""

from __future__ import annotations

from typing import Sequence

from workloads import lm
from workloads.data import genomes
from workloads.data.sources import Windows
from workloads.harness import Session, run_workload
from workloads.models.configs import SIZES


def body(session: Session) -> None:
    args = session.args
    cfg = SIZES[args.model].with_(vocab_size=genomes.VOCAB_SIZE, block_size=max(args.seq_len, 1024))
    session.log(f"generating {args.num_sequences} genomes of {args.seq_len} codons (seed {args.seed})")
    data = genomes.dataset(args.num_sequences, args.seq_len, seed=args.seed)
    source = Windows("genomes", data, session.device.torch_device, args.seed, genomes.VOCAB_SIZE - 1)
    lm.run(session, cfg, source)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("genslm", body, argv, training=True)


if __name__ == "__main__":
    raise SystemExit(main())
