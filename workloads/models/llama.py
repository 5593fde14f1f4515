"""A Llama-style decoder for inference, readable top to bottom, with a KV cache and optional
tensor parallelism (Megatron-style, across the ranks of one node).

token ids -> embedding -> n_layer x Block -> RMSNorm -> logits
Block: x + Attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)).
Attention: rotary position embedding on q and k, grouped-query attention (n_kv_head key/value
heads shared by n_head / n_kv_head query heads), keys and values appended to a preallocated
cache so a decode step reads the cache instead of recomputing the prefix.

Two ways to decode (``forward`` for the prompt in both):
- ``forward(ids, start)``: the plain one. The cache is read up to the current position, so every
  step has other shapes: simple, but on a GPU each of the step's few hundred small kernels is
  launched from Python, and a batch-1 step of a 7B model took 26.9 ms on an H200 where reading its
  weights takes 2.8 ms (benchmarks/RESULTS.md, 2026-11-27).
- ``step(token, position)``: gpt-fast's static KV cache. The position is a device tensor and every
  step attends over the whole preallocated cache under a mask, so all shapes are fixed: the step can
  be compiled (``torch.compile``) and, on CUDA, captured once as a CUDA graph and replayed
  (``mode="reduce-overhead"``), which removes the launches. The masked positions still cost the
  reads of the whole cache (the price of static shapes). Both give the same tokens
  (tests/workloads/test_llm_inference.py).

Tensor parallel over ``tp`` ranks: each rank holds n_head / tp query heads, n_kv_head / tp
key/value heads (at least one) and ffn / tp of the MLP; the attention output and MLP down
projections are row-parallel, followed by one all-reduce each. Embedding and output head are
replicated. Weights are random: speed does not depend on their values.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn
from torch.nn import functional as F

from workloads.models.llama_configs import SIZES, LlamaConfig, kv_bytes_per_token, num_params  # noqa: F401


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary_tables(cfg: LlamaConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim))
    angles = torch.outer(torch.arange(cfg.max_seq, device=device).float(), inv)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (b, heads, s, d); cos/sin (s, d/2) for the positions of x."""
    even, odd = x[..., 0::2].float(), x[..., 1::2].float()
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return rotated.type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig, tp: int) -> None:
        super().__init__()
        self.heads = cfg.n_head // tp
        self.kv_heads = max(1, cfg.n_kv_head // tp)
        self.head_dim = cfg.head_dim
        self.q = nn.Linear(cfg.n_embd, self.heads * self.head_dim, bias=False)  # column-parallel
        self.kv = nn.Linear(cfg.n_embd, 2 * self.kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(self.heads * self.head_dim, cfg.n_embd, bias=False)  # row-parallel
        # Buffers, so that a compiled step mutates them in place (and a CUDA graph keeps their addresses).
        self.cache_k: torch.Tensor | None
        self.cache_v: torch.Tensor | None
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)

    def allocate(self, batch: int, length: int, device: torch.device, dtype: torch.dtype) -> None:
        # Zeros, not empty: the static step reads every position, and a masked position whose value
        # is NaN would still poison the output (0 x NaN).
        shape = (batch, self.kv_heads, length, self.head_dim)
        self.cache_k = torch.zeros(shape, device=device, dtype=dtype)
        self.cache_v = torch.zeros(shape, device=device, dtype=dtype)

    def step(self, x: torch.Tensor, position: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
        """One decode token per request (x: b, 1, h) at ``position`` (a 1-element device tensor),
        attending over the whole cache under ``mask`` (1, length): fixed shapes throughout."""
        b = x.shape[0]
        q = self.q(x).view(b, 1, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, 1, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        assert self.cache_k is not None and self.cache_v is not None, "allocate() the cache first"
        self.cache_k.index_copy_(2, position, k)
        self.cache_v.index_copy_(2, position, v)
        # enable_gqa: the kv heads serve their query groups inside the kernel, with no copy of the cache.
        y = F.scaled_dot_product_attention(q, self.cache_k, self.cache_v, attn_mask=mask,
                                           enable_gqa=self.kv_heads != self.heads)
        return self.o(y.transpose(1, 2).reshape(b, 1, self.heads * self.head_dim))

    def forward(self, x: torch.Tensor, start: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        assert self.cache_k is not None and self.cache_v is not None, "allocate() the cache first"
        self.cache_k[:, :, start:start + s] = k
        self.cache_v[:, :, start:start + s] = v
        keys, values = self.cache_k[:, :, :start + s], self.cache_v[:, :, :start + s]
        if self.kv_heads != self.heads:  # grouped-query attention: each kv head serves a group
            repeat = self.heads // self.kv_heads
            keys, values = keys.repeat_interleave(repeat, dim=1), values.repeat_interleave(repeat, dim=1)
        # Prefill: causal over the prompt. Decode (s == 1): the new token sees the whole cache.
        y = F.scaled_dot_product_attention(q, keys, values, is_causal=s > 1 and start == 0)
        return self.o(y.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig, tp: int, reduce: "AllReduce") -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(cfg.n_embd), RMSNorm(cfg.n_embd)
        self.attn = Attention(cfg, tp)
        width = cfg.ffn // tp
        self.gate_up = nn.Linear(cfg.n_embd, 2 * width, bias=False)  # column-parallel
        self.down = nn.Linear(width, cfg.n_embd, bias=False)  # row-parallel
        self.reduce = reduce

    def forward(self, x: torch.Tensor, start: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.reduce(self.attn(self.attn_norm(x), start, cos, sin))
        return self.mlp(x)

    def step(self, x: torch.Tensor, position: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
        x = x + self.reduce(self.attn.step(self.attn_norm(x), position, cos, sin, mask))
        return self.mlp(x)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.reduce(self.down(F.silu(gate) * up))


class AllReduce:
    """Sum of a row-parallel product's partial results over the tensor-parallel ranks."""

    def __init__(self, tp: int) -> None:
        self.tp = tp

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp > 1:
            import torch.distributed as dist

            dist.all_reduce(x)
        return x


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig, tp: int = 1) -> None:
        super().__init__()
        if cfg.n_head % tp or cfg.ffn % tp:
            raise ValueError(f"{cfg.n_head} heads and MLP width {cfg.ffn} must divide by tensor parallel {tp}")
        self.cfg = cfg
        reduce = AllReduce(tp)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg, tp, reduce) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.cos: torch.Tensor | None = None
        self.sin: torch.Tensor | None = None
        self.slots: torch.Tensor | None = None  # 0 .. length-1: the cache's positions

    def allocate(self, batch: int, length: int) -> None:
        """The KV cache for ``batch`` requests of up to ``length`` tokens, and the rotary tables."""
        weight = self.head.weight
        if length > self.cfg.max_seq:
            raise ValueError(f"{length} tokens exceed the model's {self.cfg.max_seq} positions")
        for block in self.blocks:
            block.attn.allocate(batch, length, weight.device, weight.dtype)  # type: ignore[union-attr,operator]
        self.cos, self.sin = rotary_tables(self.cfg, weight.device)
        self.slots = torch.arange(length, device=weight.device)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        """Logits of the last position for tokens ``ids`` (b, s) at positions start..start+s-1."""
        assert self.cos is not None and self.sin is not None
        s = ids.shape[1]
        cos, sin = self.cos[start:start + s], self.sin[start:start + s]
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, start, cos, sin)
        return self.head(self.norm(x[:, -1:]))[:, 0]

    @torch.inference_mode()
    def step(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """Logits for one new token per request (token: b, 1) at ``position`` (a 1-element device
        tensor): the static-cache decode step, whose shapes never change (module docstring)."""
        assert self.cos is not None and self.sin is not None and self.slots is not None
        cos, sin = self.cos[position], self.sin[position]
        mask = (self.slots <= position).unsqueeze(0)  # (1, length): the prefix and the new token
        x = self.embed(token)
        for block in self.blocks:
            x = cast(Block, block).step(x, position, cos, sin, mask)
        return self.head(self.norm(x))[:, 0]
