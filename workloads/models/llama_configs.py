"""Llama-style decoder sizes and their arithmetic, without torch (the registry imports it on
login nodes that have no torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LlamaConfig:
    n_layer: int
    n_embd: int
    n_head: int
    n_kv_head: int
    ffn: int
    vocab_size: int
    max_seq: int = 4096
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# Llama 2 (Touvron et al., 2023, table 1 and the released configs): 7B 32x4096, 13B 40x5120,
# 70B 80x8192 with 8 key/value heads; vocabulary 32000. tiny and small run on a laptop CPU.
SIZES: dict[str, LlamaConfig] = {
    "tiny": LlamaConfig(n_layer=2, n_embd=64, n_head=4, n_kv_head=2, ffn=172, vocab_size=256, max_seq=1024),
    "small": LlamaConfig(n_layer=8, n_embd=512, n_head=8, n_kv_head=8, ffn=1376, vocab_size=32000, max_seq=2048),
    "llama2-7b": LlamaConfig(n_layer=32, n_embd=4096, n_head=32, n_kv_head=32, ffn=11008, vocab_size=32000),
    "llama2-13b": LlamaConfig(n_layer=40, n_embd=5120, n_head=40, n_kv_head=40, ffn=13824, vocab_size=32000),
    "llama2-70b": LlamaConfig(n_layer=80, n_embd=8192, n_head=64, n_kv_head=8, ffn=28672, vocab_size=32000),
}


def num_params(cfg: LlamaConfig) -> int:
    """Parameters of the whole model (embedding and output head untied, as in Llama 2)."""
    attn = cfg.n_embd * cfg.n_embd * 2 + cfg.n_embd * cfg.head_dim * cfg.n_kv_head * 2
    mlp = 3 * cfg.n_embd * cfg.ffn
    norms = 2 * cfg.n_embd
    return cfg.n_layer * (attn + mlp + norms) + 2 * cfg.vocab_size * cfg.n_embd + cfg.n_embd


def kv_bytes_per_token(cfg: LlamaConfig, element_bytes: int) -> int:
    """Bytes of keys and values one token adds to the cache (all layers, all ranks)."""
    return 2 * cfg.n_layer * cfg.n_kv_head * cfg.head_dim * element_bytes
