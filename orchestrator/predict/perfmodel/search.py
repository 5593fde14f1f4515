"""Best layout for a model on N devices: every layout estimated, ranked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.predict.perfmodel.layout import enumerate_layouts
from orchestrator.predict.perfmodel.machine import Machine
from orchestrator.predict.perfmodel.transformer import Estimate, ModelShape, estimate

if TYPE_CHECKING:
    from workloads.models.configs import GPTConfig


def gpt_shape(model: str, seq_len: int, *, vocab: int | None = None, attention: str = "sdpa") -> ModelShape:
    """The shape of a gpt2 workload preset (workloads/models/configs.py) at ``seq_len``."""
    from workloads.models.configs import SIZES

    if model not in SIZES:
        raise KeyError(model)
    return config_shape(SIZES[model], seq_len, vocab=vocab, attention=attention)


def config_shape(cfg: GPTConfig, seq_len: int, *, vocab: int | None = None, attention: str = "sdpa") -> ModelShape:
    """The shape of GPT config ``cfg`` at ``seq_len`` (a preset's, or `orch predict`'s own shapes)."""
    return ModelShape(layers=cfg.n_layer, hidden=cfg.n_embd, heads=cfg.n_head, vocab=vocab or cfg.vocab_size,
                      seq_len=seq_len, fused_attention=attention != "manual", positions=max(seq_len, cfg.block_size))


def rank(shape: ModelShape, machine: Machine, devices: int, *, precision: str, batch_size: int,
         micro_batch: int | None = None, strategies: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3"),
         recompute: tuple[bool, ...] = (False, True)) -> list[Estimate]:
    """Every layout of ``devices`` devices, those that fit first, fastest first; among equally
    fast ones the one with less memory per device first."""
    layouts = enumerate_layouts(devices, layers=shape.layers, hidden=shape.hidden, seq_len=shape.seq_len,
                                strategies=strategies, recompute=recompute)
    estimates = [estimate(shape, layout, machine, precision=precision, batch_size=batch_size,
                          micro_batch=micro_batch) for layout in layouts]
    return sorted(estimates, key=lambda e: (not e.fits, round(e.step_s, 9), e.memory_gb))
