"""GPT model sizes, as plain data (no torch: the registry sizes memory from them).

minGPT/nanoGPT naming. The GPT-2 family is OpenAI's; gpt2-xxl and gpt2-xxxl
follow the GPT-3 paper's 2.7B and 6.7B shapes (32 layers, hidden 2560 and 4096),
which is what "minGPT-style configs up to ~6.6B" means here; gpt-13b and gpt-25b
extend the family for the long-sequence and GenSLM studies (GPT-3 13B's shape,
and a 25B shape with hidden 6144). ``tiny`` is for tests and laptops.

| size        | layers | heads | hidden | params (vocab 50257, pos 1024) |
|-------------|-------:|------:|-------:|-------------------------------:|
| tiny        |      2 |     2 |     64 |       ~3.3M (mostly embedding) |
| gpt2        |     12 |    12 |    768 |   124M                         |
| gpt2-medium |     24 |    16 |   1024 |   355M                         |
| gpt2-large  |     36 |    20 |   1280 |   774M                         |
| gpt2-xl     |     48 |    25 |   1600 |   1.56B                        |
| gpt2-xxl    |     32 |    32 |   2560 |   2.65B                        |
| gpt2-xxxl   |     32 |    32 |   4096 |   6.65B                        |
| gpt-13b     |     40 |    40 |   5120 |   12.8B                        |
| gpt-25b     |     56 |    48 |   6144 |   25.7B                        |
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GPT2_VOCAB = 50257


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int = GPT2_VOCAB
    block_size: int = 1024  # longest sequence (size of the position embedding)
    bias: bool = True  # GPT-2 has biases in linears and LayerNorms
    dropout: float = 0.0  # benchmarks run without dropout (it adds RNG work, not model FLOPs)

    def with_(self, **changes: object) -> "GPTConfig":
        return replace(self, **changes)  # type: ignore[arg-type]


SIZES: dict[str, GPTConfig] = {
    "tiny": GPTConfig(2, 2, 64),
    "gpt2": GPTConfig(12, 12, 768),
    "gpt2-medium": GPTConfig(24, 16, 1024),
    "gpt2-large": GPTConfig(36, 20, 1280),
    "gpt2-xl": GPTConfig(48, 25, 1600),
    "gpt2-xxl": GPTConfig(32, 32, 2560),
    "gpt2-xxxl": GPTConfig(32, 32, 4096),
    "gpt-13b": GPTConfig(40, 40, 5120),
    "gpt-25b": GPTConfig(56, 48, 6144),
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

    The token embedding is tied to the output head and counted once (the head's
    matrix product uses it). The position embedding is a lookup, not a product,
    so it is left out unless asked for (nanoGPT counts N the same way).
    """
    total = cfg.vocab_size * cfg.n_embd + cfg.n_layer * layer_params(cfg.n_embd, cfg.bias)
    total += 2 * cfg.n_embd if cfg.bias else cfg.n_embd  # final LayerNorm
    if include_position:
        total += cfg.block_size * cfg.n_embd
    return total
