"""Parallel layouts: how N devices split a model, and every layout of N devices."""

from __future__ import annotations

from dataclasses import dataclass

# Data-parallel memory modes: torch DDP, DeepSpeed ZeRO stages, FSDP (FULL_SHARD ~ ZeRO-3,
# SHARD_GRAD_OP ~ ZeRO-2 in both time and memory here).
ZERO_STAGE = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp-grad-op": 2, "fsdp-full": 3}


@dataclass(frozen=True)
class Layout:
    """Degrees of data (dp), tensor (tp), pipeline (pp) and context (cp) parallelism.

    ``tp2d``: 2D tensor parallel (a tp = r x c grid, Subramanian et al.) instead of Megatron 1D;
    1D always runs with Megatron's sequence parallel (LayerNorm/dropout activations split by tp).
    ``strategy``: the data-parallel memory mode (:data:`ZERO_STAGE`); ``recompute``: full
    activation recompute (checkpointing every layer).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    strategy: str = "ddp"
    recompute: bool = False
    tp2d: bool = False
    # Megatron's interleaved 1F1B: each device holds vp model chunks, dividing the bubble by vp
    # (Narayanan et al. SC21, section 2.2.2: bubble (p-1)/(v m)) at vp times the sends.
    vp: int = 1
    # Whether the data-parallel gradient reduction overlaps the backward (torch DDP's buckets,
    # FSDP). False: reduced after the backward, as Megatron-LM's own DDP (`--DDP-impl local`,
    # its default until 2023: megatron/arguments.py; gradients all-reduced in train_step).
    grad_overlap: bool = True

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def zero(self) -> int:
        return ZERO_STAGE[self.strategy]

    @property
    def name(self) -> str:
        parts = [f"dp{self.dp}"] if self.dp > 1 else []
        if self.tp > 1:
            parts.append(f"tp{self.tp}" + ("(2d)" if self.tp2d else ""))
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        text = "+".join(parts) or "single"
        if self.dp > 1 and self.strategy != "ddp":
            text += f" {self.strategy}"
        return text + (" +recompute" if self.recompute else "")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_layouts(devices: int, *, layers: int, hidden: int, seq_len: int,
                      strategies: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3"),
                      recompute: tuple[bool, ...] = (False, True), tp2d: bool = True) -> list[Layout]:
    """Every layout of exactly ``devices`` devices the model can take: tp divides the hidden size
    (where it does not divide the heads, each rank computes ceil(heads/tp) heads: padding the
    model counts as lost time), pp at most the layers, cp divides the sequence; ZeRO stages only with dp > 1 (FSDP modes
    are the same in the model as ZeRO-3/ZeRO-2)."""
    out: list[Layout] = []
    for tp in _divisors(devices):
        if hidden % tp:
            continue
        for pp in _divisors(devices // tp):
            if pp > layers:
                continue
            for cp in _divisors(devices // (tp * pp)):
                if seq_len % cp:
                    continue
                dp = devices // (tp * pp * cp)
                for strategy in strategies if dp > 1 else ("ddp",):
                    for rc in recompute:
                        out.append(Layout(dp, tp, pp, cp, strategy, rc))
                        # 2D only where the grid is not a line (tp = r x c with r, c > 1).
                        if tp2d and tp >= 4 and any(1 < r < tp and tp % r == 0 for r in range(2, tp)):
                            out.append(Layout(dp, tp, pp, cp, strategy, rc, tp2d=True))
    return out
