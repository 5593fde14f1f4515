"""A GPT (GPT-2 architecture) in plain PyTorch, readable top to bottom (after nanoGPT/minGPT).

token ids -> token + position embeddings -> n_layer x Block -> LayerNorm -> logits
Block: x + Attention(LN(x)), then x + MLP(LN(x)); pre-norm as in GPT-2.

Attention (``cfg.attention``):
- ``sdpa`` (default): ``F.scaled_dot_product_attention`` with a causal mask, which picks
  a fused/flash kernel where the device has one (the s x s scores are never stored).
- ``manual``: minGPT's explicit softmax(Q K^T / sqrt(d)) with a causal mask and
  attention dropout, the (batch, heads, s, s) score matrix materialised in memory and
  kept for the backward pass, as study B's lightning-GPT/minGPT ran it.
With ``cfg.dropout`` > 0, dropout also follows the embeddings and each residual branch
(minGPT's embd_pdrop and resid_pdrop); at 0 those are not in the graph at all.
``cfg.tie_weights`` false gives the output head its own matrix, as minGPT has.
``cfg.checkpointing`` recomputes each block's forward in the backward (torch.utils.checkpoint,
non-reentrant): a block keeps only its input for the backward.

Tensor parallelism (``workloads/parallel.py``) shards the linears column- and row-wise;
attention therefore reads its head count from the width ``c_attn`` returns (the local heads),
not from the configuration.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from workloads.models.configs import ATTENTIONS, GPTConfig


def _dropout(p: float) -> nn.Module:
    """Dropout where asked for; at 0 an identity, so a benchmark without dropout runs no extra kernel."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"hidden size {cfg.n_embd} is not a multiple of {cfg.n_head} heads")
        self.n_head = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # q, k, v in one product
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        if cfg.attention not in ATTENTIONS:
            raise ValueError(f"attention {cfg.attention!r}: expected one of {', '.join(ATTENTIONS)}")
        self.manual = cfg.attention == "manual"
        self.dropout = cfg.dropout
        self.attn_dropout = _dropout(cfg.dropout)
        self.resid_dropout = _dropout(cfg.dropout)
        self.context: Any = None  # context parallel: this rank's slice of the sequence (workloads/context.py)

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        b, s, _ = x.shape
        qkv = self.c_attn(x)
        width = qkv.size(-1) // 3  # the hidden size, or this rank's share of it under tensor parallelism
        q, k, v = qkv.split(width, dim=2)
        # (b, s, width) -> (b, heads, s, head_dim)
        heads = width // self.head_dim
        q, k, v = (t.view(b, s, heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        mask = None
        if self.context is not None:  # this rank's queries against every rank's keys and values
            k, v = self.context.gather(k, dim=2), self.context.gather(v, dim=2)
            mask = self.context.causal_mask(s, q.device) if causal else None
        if self.manual:
            y = self._manual(q, k, v, causal, mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                               dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(b, s, width)
        return self.resid_dropout(self.c_proj(y))

    def _manual(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """minGPT's attention, step by step: (b, heads, s, s) scores, mask, softmax, dropout, @ v.
        ``mask`` (context parallel): where each query may attend, in place of the square causal mask."""
        s = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if mask is not None:
            att = att.masked_fill(~mask, float("-inf"))
        elif causal:
            # minGPT keeps a tril buffer of block_size^2; made here per call (s^2 booleans,
            # small beside the scores) so that meta-device construction needs no buffer.
            future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
            att = att.masked_fill(future, float("-inf"))
        # Softmax in fp32, back to the scores' dtype: what CUDA's autocast does (softmax is on its fp32
        # list; the CPU's autocast runs it in 16 bits), so the program saves the same bytes on every
        # device and `orch plan`'s CPU trace predicts the GPU run (tests/workloads/test_autocast_semantics.py).
        att = F.softmax(att.float(), dim=-1).to(q.dtype)
        att = self.attn_dropout(att)
        return att @ v


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's GELU
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = _dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """One transformer layer (the unit FSDP shards and the block micro-benchmark times)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)
        self.checkpointing = cfg.checkpointing

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        if self.checkpointing and torch.is_grad_enabled():
            return checkpoint(self._forward, x, causal, use_reentrant=False)
        return self._forward(x, causal)

    def _forward(self, x: torch.Tensor, causal: bool) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), causal)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = _dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.context: Any = None  # context parallel: this rank's slice of every sequence (workloads/context.py)
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        if not any(p.is_meta for p in self.parameters()):
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation (also run after a model built on the meta device is materialised)."""
        self.apply(self._init_weights)
        # Residual projections scaled by 1/sqrt(2 * n_layer) so the residual stream stays O(1).
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * self.cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            module.reset_parameters()

    def forward(self, idx: torch.Tensor,
                targets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, s = idx.shape
        if s > self.cfg.block_size:
            raise ValueError(f"sequence of {s} tokens exceeds block size {self.cfg.block_size}")
        start = 0
        if self.context is not None:  # context parallel: compute on this rank's slice alone
            idx = self.context.take(idx)
            targets = self.context.take(targets) if targets is not None else None
            start = self.context.offset(idx.size(1))
        pos = torch.arange(start, start + idx.size(1), device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            # Loss in fp32 whatever the autocast dtype: a half-precision softmax over 50k logits loses bits.
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss
