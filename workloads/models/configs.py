"""GPT model sizes, as plain data (no torch: the registry sizes memory from them).

The names are lightning-GPT's presets (``MINGPT_PRESETS`` in lightning_gpt/models.py,
itself minGPT's list extended), which is what study B ran by name: openai-gpt, gpt2 ..
gpt2-xl (OpenAI's GPT-2 family), gpt2-xxl, gpt2-xxxl and gpt2-4xl (lightning-GPT's deeper
1600/1920-wide stacks), gopher-44m and minGPT's small gpt-mini/micro/nano. Beside them:
GPT-3's 2.7B, 6.7B and XL shapes and a 30B (gpt3-2.7b, gpt3-6.7b, gpt3-xl, gpt3-30b), study A's
SN30 GenSLM 13B (genslm-13b-sn30), gpt-13b and gpt-25b for the
long-sequence and GenSLM studies (GPT-3 13B's shape, and a 25B shape with hidden 6144),
and ``tiny`` for tests and laptops.

Parameter counts (``python -m workloads.models.configs`` prints this table):

- ``params``: GPT-2's vocabulary 50257 and 1024 positions, the output head tied to the
  token embedding (orch's default model), every parameter once;
- ``mingpt``: what minGPT prints ("number of parameters: %.2fM"): the transformer without
  the untied lm_head, i.e. token + position embeddings, the blocks and the final
  LayerNorm, at study B's character vocabulary 67 (the distinct characters of
  char-rnn's shakespeare_input.txt, 4,573,338 characters) and lightning-GPT's block size
  128. These reproduce study B's 85.21M (gpt2) and 302.51M (gpt2-medium); vocabulary 65
  (tiny-shakespeare's) would give 85.20M.

| size        | layers | heads | hidden |  params |  mingpt |
|-------------|-------:|------:|-------:|--------:|--------:|
| tiny        |      2 |     2 |     64 |   3.38M |   0.11M |
| openai-gpt  |     12 |    12 |    768 | 124.44M |  85.21M |
| gpt2        |     12 |    12 |    768 | 124.44M |  85.21M |
| gpt2-medium |     24 |    16 |   1024 | 354.82M | 302.51M |
| gpt2-large  |     36 |    20 |   1280 | 774.03M | 708.64M |
| gpt2-xl     |     48 |    25 |   1600 |   1.56B |   1.48B |
| gpt2-xxl    |     96 |    25 |   1600 |   3.03B |   2.95B |
| gpt2-xxxl   |    100 |    30 |   1920 |   4.52B |   4.43B |
| gpt2-4xl    |    190 |    30 |   1920 |   8.51B |   8.41B |
| gopher-44m  |      8 |    16 |    512 |  51.48M |  25.32M |
| gpt-mini    |      6 |     6 |    192 |  12.52M |   2.71M |
| gpt-micro   |      4 |     4 |    128 |   7.36M |   0.82M |
| gpt-nano    |      3 |     3 |     48 |   2.55M |   0.09M |
| gpt3-2.7b   |     32 |    32 |   2560 |   2.65B |   2.52B |
| gpt3-6.7b   |     32 |    32 |   4096 |   6.65B |   6.44B |
| gpt3-xl     |     24 |    16 |   2048 |   1.31B |   1.21B |
| gpt3-30b    |     48 |    56 |   7168 |  29.97B |  29.60B |
| genslm-13b-sn30 | 44 |    64 |   4992 |  13.17B |  13.16B |
| gpt-13b     |     40 |    40 |   5120 |  12.85B |  12.59B |
| gpt-25b     |     56 |    48 |   6144 |  25.69B |  25.37B |

Study B's summary says "minGPT-style configs up to ~6.6B" for gpt2-xxxl; lightning-GPT's
gpt2-xxxl is 4.43B and none of its presets is 6.6B (GPT-3's 6.7B shape is gpt3-6.7b here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

GPT2_VOCAB = 50257
ATTENTIONS: tuple[str, ...] = ("sdpa", "manual")
# Study B's data and model as lightning-GPT ran them: character vocabulary of char-rnn's
# shakespeare_input.txt and train.py's default --block_size.
STUDY_B_VOCAB = 67
STUDY_B_BLOCK = 128


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int = GPT2_VOCAB
    block_size: int = 1024  # longest sequence (size of the position embedding)
    bias: bool = True  # GPT-2 has biases in linears and LayerNorms
    dropout: float = 0.0  # benchmarks run without dropout (it adds RNG work, not model FLOPs)
    # sdpa: torch's scaled_dot_product_attention (fused/flash kernels where the device has
    # them); manual: minGPT's softmax(QK^T/sqrt(d)) with the s x s scores materialised.
    attention: str = "sdpa"
    tie_weights: bool = True  # output head shares the token embedding (GPT-2); minGPT does not tie
    # Activation checkpointing: each block keeps only its input and recomputes its forward
    # during the backward (torch.utils.checkpoint); no model FLOPs added, hardware FLOPs are.
    checkpointing: bool = False

    def with_(self, **changes: object) -> "GPTConfig":
        return replace(self, **changes)  # type: ignore[arg-type]


SIZES: dict[str, GPTConfig] = {
    "tiny": GPTConfig(2, 2, 64),
    # lightning-GPT's MINGPT_PRESETS, by name
    "openai-gpt": GPTConfig(12, 12, 768),
    "gpt2": GPTConfig(12, 12, 768),
    "gpt2-medium": GPTConfig(24, 16, 1024),
    "gpt2-large": GPTConfig(36, 20, 1280),
    "gpt2-xl": GPTConfig(48, 25, 1600),
    "gpt2-xxl": GPTConfig(96, 25, 1600),
    "gpt2-xxxl": GPTConfig(100, 30, 1920),
    "gpt2-4xl": GPTConfig(190, 30, 1920),
    "gopher-44m": GPTConfig(8, 16, 512),
    "gpt-mini": GPTConfig(6, 6, 192),
    "gpt-micro": GPTConfig(4, 4, 128),
    "gpt-nano": GPTConfig(3, 3, 48),
    # GPT-3 shapes and larger
    "gpt3-2.7b": GPTConfig(32, 32, 2560),
    "gpt3-6.7b": GPTConfig(32, 32, 4096),
    # Study A (issue 47): GPT-3 XL, the shape study A gives its GenSLM 1.5B (24 layers, 16 heads,
    # 2048 wide); GPT-3 30B for A.5's sparsity runs, a shape of orch's choosing (the study gives
    # none): 48 layers of 7168, 12 x 48 x 7168^2 = 29.6B in the blocks.
    "gpt3-xl": GPTConfig(24, 16, 2048),
    "gpt3-30b": GPTConfig(48, 56, 7168),
    # GenSLM 13B as study A ran it on the SN30 (44 layers, 64 heads, 4992 wide, vocabulary 71);
    # genslm-13b's A100 shape is gpt-13b's (40 x 5120, 40 heads).
    "genslm-13b-sn30": GPTConfig(44, 64, 4992, vocab_size=71),
    "gpt-13b": GPTConfig(40, 40, 5120),
    "gpt-25b": GPTConfig(56, 48, 6144),
    # MPT (study D.1), LLM Foundry's pretraining shapes (scripts/train/yamls/pretrain/mpt-*.yaml):
    # no biases, vocabulary 50368 (GPT-NeoX's tokenizer padded), sequence 2048. Departure: learned
    # position embeddings here where MPT uses ALiBi (2048 x hidden more parameters, no model FLOPs).
    "mpt-125m": GPTConfig(12, 12, 768, vocab_size=50368, block_size=2048, bias=False),
    "mpt-1b": GPTConfig(24, 16, 2048, vocab_size=50368, block_size=2048, bias=False),
    "mpt-3b": GPTConfig(32, 20, 2560, vocab_size=50368, block_size=2048, bias=False),
    "mpt-7b": GPTConfig(32, 32, 4096, vocab_size=50368, block_size=2048, bias=False),
    "mpt-13b": GPTConfig(40, 40, 5120, vocab_size=50368, block_size=2048, bias=False),
    "mpt-30b": GPTConfig(48, 64, 7168, vocab_size=50368, block_size=2048, bias=False),
    "mpt-70b": GPTConfig(80, 64, 8192, vocab_size=50368, block_size=2048, bias=False),
}


def layer_params(n_embd: int, bias: bool = True) -> int:
    """Parameters of one transformer block: 12h^2 weights (+13h biases and LayerNorms)."""
    h = n_embd
    weights = 3 * h * h + h * h + 4 * h * h + 4 * h * h  # qkv, attention projection, MLP up, MLP down
    biases = (3 * h + h + 4 * h + h) if bias else 0
    norms = 2 * (2 * h if bias else h)
    return weights + biases + norms


def num_params(cfg: GPTConfig, *, include_position: bool = False) -> int:
    """N of the FLOP model: every weight a token's maths uses once.

    The token embedding is counted once whether or not the output head is tied to it:
    tied, the head's matrix product uses it; untied, the head is a matrix of the same size
    and the embedding a lookup. The position embedding is a lookup, not a product, so it
    is left out unless asked for (nanoGPT counts N the same way).
    """
    total = cfg.vocab_size * cfg.n_embd + cfg.n_layer * layer_params(cfg.n_embd, cfg.bias)
    total += 2 * cfg.n_embd if cfg.bias else cfg.n_embd  # final LayerNorm
    if include_position:
        total += cfg.block_size * cfg.n_embd
    return total


def total_params(cfg: GPTConfig) -> int:
    """Every parameter tensor of the model once (an untied head adds vocab x hidden)."""
    untied_head = 0 if cfg.tie_weights else cfg.vocab_size * cfg.n_embd
    return num_params(cfg, include_position=True) + untied_head


def param_sizes(cfg: GPTConfig) -> list[int]:
    """The element count of each parameter tensor ``GPT(cfg).parameters()`` yields, in its order
    (a tied head is the token embedding's tensor, listed once): what DeepSpeed's ZeRO-3 partitions
    or keeps whole, worked out without building the model (no torch)."""
    d, bias = cfg.n_embd, cfg.bias

    def linear(fan_in: int, fan_out: int, with_bias: bool = bias) -> list[int]:
        return [fan_in * fan_out, fan_out] if with_bias else [fan_in * fan_out]

    norm = [d, d] if bias else [d]
    block = [*norm, *linear(d, 3 * d), *linear(d, d), *norm, *linear(d, 4 * d), *linear(4 * d, d)]
    head = [] if cfg.tie_weights else linear(d, cfg.vocab_size, with_bias=False)
    return [cfg.vocab_size * d, cfg.block_size * d, *block * cfg.n_layer, *norm, *head]


def mingpt_params(cfg: GPTConfig) -> int:
    """minGPT's printed count: ``sum(p.numel() for p in self.transformer.parameters())``.

    Token and position embeddings, the blocks and the final LayerNorm; the lm_head (untied
    in minGPT) is not counted. This is the figure study B reports (85.21M for gpt2 at
    vocabulary 67 and block size 128).
    """
    return num_params(cfg, include_position=True)


def study_b_config(name: str) -> GPTConfig:
    """A preset as study B built it: character vocabulary 67, block size 128, untied head."""
    return SIZES[name].with_(vocab_size=STUDY_B_VOCAB, block_size=STUDY_B_BLOCK, tie_weights=False,
                             attention="manual", dropout=0.1)


def preset_rows() -> list[dict[str, Any]]:
    """One row per size: its shape, orch's count and minGPT's count at study B's vocabulary and block."""
    return [{"preset": name, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd,
             "params": total_params(cfg), "params_mingpt_study_b": mingpt_params(study_b_config(name))}
            for name, cfg in SIZES.items()]


def human(n: int) -> str:
    """85205760 -> '85.21M', 1475873600 -> '1.48B' (minGPT prints millions to 2 decimals)."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


if __name__ == "__main__":
    for row in preset_rows():
        print(f"| {row['preset']:<11} | {row['n_layer']:>6} | {row['n_head']:>5} | {row['n_embd']:>6} | "
              f"{human(row['params']):>7} | {human(row['params_mingpt_study_b']):>7} |")
