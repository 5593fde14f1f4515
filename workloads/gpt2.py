"""GPT-2 pre-training throughput (nanoGPT/minGPT-style model, ``workloads/models/gpt.py``).

Sizes by lightning-GPT's preset names (tiny, gpt2 .. gpt2-4xl, gpt3-2.7b .. gpt-25b; see
``workloads/models/configs.py``), strategies ddp, fsdp-full, fsdp-grad-op, zero1..zero3
(DeepSpeed), gradient accumulation, any sequence length (the position table grows past
1024 when asked, or is exactly ``--block-size``), synthetic, shipped, generated
(Shakespeare-sized) or streamed-file data with byte, GPT-2-id or character tokens, by
steps or by epochs. Reports tokens/s, samples/s, step and epoch time, peak memory and
model TFLOP/s from 6N + 12*L*h*s per token (see ``workloads/lm.py``), MFU with
--peak-tflops; ``model_params_with_position`` is minGPT's printed count (embeddings,
blocks and final LayerNorm, no lm_head), ``vocab_size`` and ``block_size`` the model's.
``--attention manual`` runs minGPT's unfused attention (the s x s scores in memory);
``--dropout`` and ``--tie-weights false`` complete minGPT's model (study B).
``--sparsity S`` prunes the blocks' linear weights by magnitude and keeps them pruned
(``workloads/sparsity.py``; dense kernels, so no speed-up is expected on GPUs).

Layouts (``workloads/layouts.py``, ``workloads/parallel.py``): ``--tp T`` tensor parallel
(Megatron-style column/row-parallel linears over torch DTensor, vocabulary-parallel embedding,
head and loss), ``--pp P`` pipeline stages (torch.distributed.pipelining, ``--pp-schedule``
1f1b or gpipe over ``--microbatches`` micro-batches), the rest of the ranks data parallel
(dp = ranks / (T x P); ddp, or FSDP2 over dp with tp). ``--sequence-parallel true`` splits
the activations between tensor-parallel regions along the sequence; ``--activation-checkpointing
full`` recomputes every block's forward in the backward (any strategy). ``--cp C`` context
parallel (``workloads/context.py``): C ranks share each sequence, each computing 1/C of its
tokens against every rank's keys and values (dp = ranks / C; ddp or FSDP2, no tp/pp). A
tp/pp/cp run starts from the same weights as the plain run of the same seed, so its losses match it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from workloads import layouts, lm, sparsity, strategies
from workloads.data.sources import Synthetic, Windows, open_source
from workloads.harness import Refused, Session, run_workload
from workloads.models.configs import SIZES, GPTConfig, mingpt_params, total_params


def model_config(session: Session, source: Synthetic | Windows | None = None) -> GPTConfig:
    """The preset's shape with this run's vocabulary, positions, attention and dropout."""
    args = session.args
    cfg = SIZES[args.model]
    data_vocab = source.vocab_size if source is not None else None
    if args.vocab_size > 0:
        if data_vocab is not None and args.vocab_size < data_vocab:
            raise Refused(f"--vocab-size {args.vocab_size} is smaller than the {data_vocab} characters "
                          f"of {source.name if source is not None else 'the data'}")
        cfg = cfg.with_(vocab_size=args.vocab_size)
    elif data_vocab is not None:
        cfg = cfg.with_(vocab_size=data_vocab)  # character-level: the text's own alphabet
    block = getattr(args, "block_size", 0)
    if block > 0:
        if args.seq_len > block:
            raise Refused(f"--seq-len {args.seq_len} exceeds --block-size {block}")
        cfg = cfg.with_(block_size=block)
    elif args.seq_len > cfg.block_size:
        cfg = cfg.with_(block_size=args.seq_len)
    if not 0.0 <= args.dropout < 1.0:
        raise Refused(f"--dropout {args.dropout}: expected 0 <= p < 1")
    cfg = cfg.with_(attention=args.attention, dropout=args.dropout, tie_weights=args.tie_weights,
                    checkpointing=layouts.checkpointing_on(args.activation_checkpointing))
    if cfg.n_embd % cfg.n_head:
        raise Refused(f"{args.model}: hidden {cfg.n_embd} not divisible by {cfg.n_head} heads")
    return cfg


def layout_of(session: Session) -> layouts.Layout:
    """The run's tp x pp x dp layout, or a refusal saying why it cannot run."""
    preset = SIZES[session.args.model]
    try:
        return layouts.resolve(vars(session.args), session.world_size, n_layer=preset.n_layer,
                               n_head=preset.n_head)
    except layouts.LayoutError as exc:
        raise Refused(str(exc)) from None


def body(session: Session) -> None:
    args = session.args
    layout = layout_of(session)
    vocab = args.vocab_size if args.vocab_size > 0 else SIZES[args.model].vocab_size  # synthetic ids
    # Data by replica: the ranks of one tensor/pipeline-parallel group read the same batches.
    source = open_source(args.data, vocab, session.device.torch_device, args.seed, layout.dp_rank(session.rank),
                         tokenizer=args.tokenizer)
    cfg = model_config(session, source)
    # model_params_with_position (lm.py) is minGPT's printed count; these make it readable.
    counts = {"vocab_size": cfg.vocab_size, "block_size": cfg.block_size}
    session.log(f"{args.model}: vocabulary {cfg.vocab_size}, block {cfg.block_size}, {cfg.attention} attention, "
                f"minGPT's count {mingpt_params(cfg) / 1e6:.2f}M, {total_params(cfg) / 1e6:.2f}M in all")

    def prepare(trainer: strategies.Trainer) -> Callable[[], dict[str, Any]]:
        pruned = sparsity.attach(trainer, args.sparsity, args.strategy) if args.sparsity > 0 else None
        return lambda: {**counts, **(pruned() if pruned is not None else {})}

    lm.run(session, cfg, source, prepare=prepare, layout=layout)


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("gpt2", body, argv, training=True)


if __name__ == "__main__":
    raise SystemExit(main())
