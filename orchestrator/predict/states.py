"""Model states per rank (weights, gradients, Adam's states) by sharding: the floor of every prediction.

No torch. Every memory prediction of a training run (traced, DeepSpeed's model, the formulas,
``orch predict``) holds at least these bytes: a rank cannot hold less than its own shard of the
states. perf-model.md, "Memory per device"; ZeRO paper (Rajbhandari et al., SC20, section 5,
K = 12 for mixed-precision Adam): baseline data parallel 16N, ZeRO-1 4N + 12N/d, ZeRO-2
2N + 14N/d, ZeRO-3 16N/d; FSDP FULL_SHARD as ZeRO-3, SHARD_GRAD_OP as ZeRO-2. fp32 training:
4 bytes of weights, 4 of gradients, 8 of Adam's moments (no master copy), sharded the same way.
fp8 training (Transformer Engine, torchao's float8) keeps the states of bf16 mixed precision: the
fp8 weights are casts made for the GEMMs (torchao casts per step; Transformer Engine also caches
an fp8 copy per linear, about 1 byte per linear parameter, not counted here).
"""

from __future__ import annotations


def model_state_bytes(n: int, strategy: str, devices: int, precision: str) -> float:
    """Weights, gradients and Adam states one rank of ``devices`` holds at least (``n`` parameters)."""
    nd = max(1, devices)
    mixed = precision in ("fp16", "bf16", "fp8")
    if strategy in ("zero3", "fsdp-full"):
        return 16 * n / nd
    if strategy in ("zero2", "fsdp-grad-op"):
        # mixed: 16-bit weights whole (2N), 16-bit gradients and fp32 master + moments sharded (14N/d);
        # fp32: weights whole (4N), gradients and moments sharded (12N/d).
        return (2 * n + 14 * n / nd) if mixed else (4 * n + 12 * n / nd)
    if strategy == "zero1":
        # mixed: 16-bit weights and gradients whole (4N), master + moments sharded (12N/d);
        # fp32: weights and gradients whole (8N), moments sharded (8N/d).
        return (4 * n + 12 * n / nd) if mixed else (8 * n + 8 * n / nd)
    return 16 * n  # ddp: everything replicated
