"""The analytic memory model's per-program layer accounting against what autograd saves (issue 25).

``analytic_memory.upcast_norm_layer`` counts, from LitGPT's and Hugging Face Llama's code, the bytes a
layer saves per token. Here a tiny block written op for op as LitGPT's (litgpt/model.py at 101e31d2:
RMSNorm upcast to fp32, fused qkv split, k/v expanded to every query head, RoPE, SDPA, the output
projection's transpose-reshape copy, LLaMAMLP) runs forward in bf16 on the CPU under
``torch.autograd.graph.saved_tensors_hooks``, and the distinct activation storages it saves are
summed. The formula must give that sum: a term it lacks or counts twice fails here. (CPU SDPA is the
flash kernel for CPU, which saves q, k, v, the output and an fp32 logsumexp, as CUDA's flash does.)
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from benchmarks.analytic_memory import Shape, upcast_norm_layer


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    dtype = x.dtype
    x = x.float()
    x_normed = x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5)
    return x_normed.to(dtype=dtype) * weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return ((x * cos) + (rotated * sin)).to(dtype=x.dtype)


def _block(x: torch.Tensor, w: dict[str, torch.Tensor], heads: int, groups: int, cos: torch.Tensor,
           sin: torch.Tensor) -> torch.Tensor:
    b, t, h = x.shape
    hs = h // heads
    per_kv = heads // groups
    qkv = F.linear(_rms_norm(x, w["norm_1"]), w["attn"])
    qkv = qkv.view(b, t, groups, per_kv + 2, hs).permute(0, 2, 3, 1, 4)
    q, k, v = qkv.split((per_kv, 1, 1), dim=2)
    if groups != heads:
        k = k.expand(b, groups, per_kv, t, hs)
        v = v.expand(b, groups, per_kv, t, hs)
    q, k, v = (z.reshape(b, -1, t, hs) for z in (q, k, v))
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(hs))
    x = x + F.linear(y.transpose(1, 2).reshape(b, t, h), w["proj"])
    n = _rms_norm(x, w["norm_2"])
    return x + F.linear(F.silu(F.linear(n, w["fc_1"])) * F.linear(n, w["fc_2"]), w["mlp_proj"])


def test_the_litgpt_layer_formula_is_what_autograd_saves() -> None:
    torch.manual_seed(0)
    b, t, h, heads, groups, ffn = 2, 16, 64, 8, 2, 96
    hs = h // heads
    bf16 = torch.bfloat16
    dims = {"attn": ((heads + 2 * groups) * hs, h), "proj": (h, h), "fc_1": (ffn, h), "fc_2": (ffn, h),
            "mlp_proj": (h, ffn)}
    weights = {name: (torch.randn(*d) * 0.05).to(bf16).requires_grad_() for name, d in dims.items()}
    weights["norm_1"] = torch.ones(h, dtype=bf16, requires_grad=True)
    weights["norm_2"] = torch.ones(h, dtype=bf16, requires_grad=True)
    angles = torch.arange(t).float()[:, None] * torch.arange(hs).float()[None, :] / hs
    cos, sin = angles.cos().to(bf16), angles.sin().to(bf16)
    x = torch.randn(b, t, h, dtype=bf16, requires_grad=True)
    # the weights and the RoPE tables are not activations (the model states, a buffer)
    not_activations = {t.untyped_storage().data_ptr() for t in [*weights.values(), cos, sin]}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in not_activations:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = _block(x, weights, heads, groups, cos, sin)
    assert out.shape == x.shape
    measured = sum(saved.values()) / (b * t)
    shape = Shape(layers=1, hidden=h, heads=heads, vocab=1, seq=t, ffn=ffn, kv_heads=groups, gated=True,
                  program="litgpt")
    assert measured == upcast_norm_layer(shape), (measured, upcast_norm_layer(shape), sorted(saved.values()))
