"""What a traced memory prediction depends on (:class:`Inputs`, the cache key), from a run's values.

Below both the predictor (``memory.py``: formulas, cache, prefetch) and the tracer
(``memory_trace.py``, ``traces.py``), which all read it; pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workloads import layouts
from workloads.models.configs import SIZES, GPTConfig


def _int(p: dict[str, Any], key: str, default: int) -> int:
    value = p.get(key)
    return int(value) if value not in (None, 0, "") else default


TRACED = ("ddp", "fsdp-full", "fsdp-grad-op")
DEEPSPEED = ("zero1", "zero2", "zero3")
STRATEGIES = TRACED + DEEPSPEED


def _bool(value: Any, default: bool) -> bool:
    if value in (None, ""):
        return default
    return str(value).lower() not in ("false", "0", "no")


def model_config(p: dict[str, Any], default_model: str = "gpt2") -> GPTConfig:
    """``workloads/gpt2.py``'s ``model_config`` from a run's values (no data opened:
    character-level text counts an alphabet of 256, the most a byte text can have)."""
    cfg = SIZES[str(p.get("model") or default_model)]
    vocab = _int(p, "vocab_size", 256 if str(p.get("tokenizer") or "") == "char" else cfg.vocab_size)
    seq = _int(p, "seq_len", 1024)
    cfg = cfg.with_(vocab_size=vocab)
    block = _int(p, "block_size", 0)
    cfg = cfg.with_(block_size=block) if block else cfg.with_(block_size=max(seq, cfg.block_size))
    return cfg.with_(attention=str(p.get("attention") or "sdpa"), dropout=float(p.get("dropout") or 0.0),
                     tie_weights=_bool(p.get("tie_weights"), True),
                     checkpointing=layouts.checkpointing_on(p.get("activation_checkpointing")))


@dataclass(frozen=True)
class Inputs:
    """What a prediction depends on (the cache key, with the code's version)."""

    cfg: GPTConfig
    strategy: str
    devices: int
    precision: str
    batch: int
    seq: int
    accum: int
    cp: int = 1  # context parallel: ranks sharing each sequence (workloads/context.py)
    tp: int = 1  # tensor parallel (workloads/parallel.py)
    sequence_parallel: bool = False  # with tp: activations split along the sequence between regions
    zero_grad: str = "none"  # "zeros": the gradients kept (zeroed) between steps (workloads/layouts.py)
    # The program's options the run passes (workloads/strategies.py), traced as the run will use them.
    optimizer_impl: str = "auto"
    ddp_single_device: bool = False
    accum_grads: str = "unsharded"
    fsdp_precision: str = "autocast"

    @classmethod
    def of(cls, p: dict[str, Any], default_model: str = "gpt2") -> "Inputs":
        tp = max(1, _int(p, "tp", 1))
        return cls(model_config(p, default_model), str(p.get("strategy") or "ddp"), max(1, _int(p, "devices", 1)),
                   str(p.get("precision") or "fp32"), _int(p, "batch_size", 8), _int(p, "seq_len", 1024),
                   max(1, _int(p, "grad_accum", 1)), max(1, _int(p, "cp", 1)), tp,
                   tp > 1 and _bool(p.get("sequence_parallel"), False), str(p.get("zero_grad") or "none"),
                   str(p.get("optimizer_impl") or "auto"), _bool(p.get("ddp_single_device"), False),
                   str(p.get("accum_grads") or "unsharded"), str(p.get("fsdp_precision") or "autocast"))


# Gradient accumulation is traced as at most this many micro-batches: from the 4th on, a
# micro-batch allocates as the one before it (gradients already there, the same no_sync state,
# the data pool of 4 token tensors all referenced), so the peak is the same to the byte; 240
# micro-batches (study D's global batch on 4 devices) took minutes to trace, 4 take a second.
ACCUM_TRACED = 4
