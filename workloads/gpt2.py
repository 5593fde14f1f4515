"""GPT-2 pre-training throughput (nanoGPT/minGPT-style model, ``workloads/models/gpt.py``).

Sizes tiny .. gpt2-xxxl (see ``workloads/models/configs.py``), strategies ddp,
fsdp-full, fsdp-grad-op, zero1..zero3 (DeepSpeed), gradient accumulation, any
sequence length (the position table grows past 1024 when asked), synthetic,
shipped-text or streamed-file data, by steps or by epochs. Reports tokens/s,
samples/s, step and epoch time, peak memory and model TFLOP/s from
6N + 12*L*h*s per token (see ``workloads/lm.py``), and MFU with --peak-tflops.
``--sparsity S`` prunes the blocks' linear weights by magnitude and keeps them pruned
(``workloads/sparsity.py``; dense kernels, so no speed-up is expected on GPUs).
"""

from __future__ import annotations

from typing import Sequence

from workloads import lm, sparsity
from workloads.data.sources import open_source
from workloads.harness import Refused, Session, run_workload
from workloads.models.configs import SIZES, GPTConfig


def model_config(session: Session) -> GPTConfig:
    args = session.args
    cfg = SIZES[args.model]
    if args.vocab_size > 0:
        cfg = cfg.with_(vocab_size=args.vocab_size)
    if args.seq_len > cfg.block_size:
        cfg = cfg.with_(block_size=args.seq_len)
    if cfg.n_embd % cfg.n_head:
        raise Refused(f"{args.model}: hidden {cfg.n_embd} not divisible by {cfg.n_head} heads")
    return cfg


def body(session: Session) -> None:
    cfg = model_config(session)
    source = open_source(session.args.data, cfg.vocab_size, session.device.torch_device,
                         session.args.seed, session.rank)
    prune = None
    if session.args.sparsity > 0:
        prune = lambda trainer: sparsity.attach(trainer, session.args.sparsity, session.args.strategy)  # noqa: E731
    lm.run(session, cfg, source, prepare=prune)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("gpt2", body, argv, training=True)


if __name__ == "__main__":
    raise SystemExit(main())
