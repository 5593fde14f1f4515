"""Parallel layout of a gpt2 run: tensor x pipeline x context x data parallel degrees, and what they allow.

No torch here: the registry, the memory formulas and the orchestrator read layouts on login
nodes without it. The torch side is ``workloads/parallel.py``.

The ranks form a (pp, dp, cp, tp) grid, tp innermost (neighbouring ranks, inside one node's
NVLink/xGMI domain): rank = ((pp_index x dp + dp_index) x cp + cp_index) x tp + tp_index,
dp = world / (tp x pp x cp). Context parallel (cp > 1: each of cp ranks holds 1/cp of every
sequence, ``workloads/context.py``) runs with data parallel only (tp = pp = 1) here.

Micro-batches. ``batch_size`` is always the micro-batch (sequences per forward of one
replica), and one optimiser step takes ``m`` micro-batches per data-parallel replica:
tokens per step = batch_size x seq_len x m x dp. Without pipeline parallelism m =
``grad_accum``. With pp > 1, m = ``microbatches``, which defaults to ``grad_accum`` when
that is above 1, else to ``pp`` (the fewest that 1F1B accepts; bubble (pp-1)/(m+pp-1)).
``grad_accum`` and ``microbatches`` name the same count: given both, they must agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

SCHEDULES: tuple[str, ...] = ("1f1b", "gpipe")
CHECKPOINTING: tuple[str, ...] = ("none", "full")
# How the optimiser clears gradients between steps: "none" frees them (zero_grad(set_to_none=True),
# torch's default since 2.0), "zeros" zeroes them in place and keeps them (torch 1.x's default, what
# programs of 2022 did): their memory is then live through the next forward and backward.
ZERO_GRAD: tuple[str, ...] = ("none", "zeros")


class LayoutError(ValueError):
    """A layout this program cannot run (the workload refuses it with this message)."""


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1  # context parallel: ranks sharing each sequence, 1/cp of its tokens each
    microbatches: int = 1  # per optimiser step and data-parallel replica
    sequence_parallel: bool = False
    checkpointing: bool = False
    schedule: str = "1f1b"

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def model_parallel(self) -> bool:
        """Tensor or pipeline parallel: the model is split, not only the data."""
        return self.tp > 1 or self.pp > 1

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pp index, dp index, tp index) of a global rank."""
        inner = self.cp * self.tp
        return rank // (self.dp * inner), (rank // inner) % self.dp, rank % self.tp

    def cp_rank(self, rank: int) -> int:
        """Which part of each sequence a rank holds (context parallel)."""
        return (rank // self.tp) % self.cp

    def dp_rank(self, rank: int) -> int:
        """Which data-parallel replica a rank serves (ranks of one replica read the same data)."""
        return self.coords(rank)[1]


def checkpointing_on(value: Any) -> bool:
    """``activation_checkpointing``: none | full (true/false accepted as full/none)."""
    word = str(value if value is not None else "none").strip().lower()
    if word in ("full", "true", "1", "yes", "on"):
        return True
    if word in ("none", "false", "0", "no", "off", ""):
        return False
    raise LayoutError(f"activation_checkpointing {value!r}: expected one of {', '.join(CHECKPOINTING)}")


def _int(p: Mapping[str, Any], key: str, default: int) -> int:
    value = p.get(key)
    return default if value in (None, "") else int(value)


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def micro_batches(pp: int, grad_accum: int, asked: int = 0) -> int:
    """Micro-batches each replica runs a step: ``grad_accum`` without pipeline stages; with them the
    pipeline's ``microbatches`` (``asked``), by default ``grad_accum`` when above 1, else one per stage.
    The one statement of this rule: the program (:func:`resolve`) and the time model read it here."""
    if pp == 1:
        return max(1, grad_accum)
    return asked or (grad_accum if grad_accum > 1 else pp)


def resolve(p: Mapping[str, Any], world: int, *, n_layer: int | None = None, n_head: int | None = None) -> Layout:
    """The layout of a run with parameter values ``p`` on ``world`` ranks, or a LayoutError
    saying what cannot run. ``n_layer``/``n_head`` (the model's) check the splits when known."""
    tp, pp, cp = _int(p, "tp", 1), _int(p, "pp", 1), _int(p, "cp", 1)
    accum = max(1, _int(p, "grad_accum", 1))
    asked = _int(p, "microbatches", 0)
    sp = _bool(p.get("sequence_parallel", False))
    ac = checkpointing_on(p.get("activation_checkpointing", "none"))
    schedule = str(p.get("pp_schedule") or "1f1b")
    strategy = str(p.get("strategy") or "ddp")
    zero_grad = str(p.get("zero_grad") or "none")
    if zero_grad not in ZERO_GRAD:
        raise LayoutError(f"zero_grad {zero_grad!r}: expected one of {', '.join(ZERO_GRAD)}")
    if zero_grad == "zeros" and strategy.startswith("zero"):
        raise LayoutError(f"zero_grad zeros with {strategy}: DeepSpeed's engine clears its own gradient "
                          "partitions; use ddp or fsdp-full/fsdp-grad-op")
    if tp < 1 or pp < 1 or cp < 1:
        raise LayoutError(f"tp {tp}, pp {pp} and cp {cp} must be at least 1")
    if cp > 1:
        _check_context_parallel(p, cp, tp, pp, strategy)
    if schedule not in SCHEDULES:
        raise LayoutError(f"pp_schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
    if sp and tp < 2:
        raise LayoutError("sequence_parallel needs tensor parallelism (tp >= 2)")
    if asked < 0:
        raise LayoutError(f"microbatches {asked}: expected 0 (the default) or more")
    if pp == 1:
        if asked and asked != accum:
            raise LayoutError(f"microbatches {asked} without pipeline parallelism: the micro-batches of a step "
                              f"are grad_accum ({accum}); set one of them")
    else:
        if asked and accum > 1 and asked != accum:
            raise LayoutError(f"microbatches {asked} and grad_accum {accum} disagree (with pp > 1 both count "
                              "the pipeline's micro-batches per step)")
    m = micro_batches(pp, accum, asked)
    if pp > 1:
        if str(p.get("precision") or "fp32") == "fp16":
            raise LayoutError("fp16 with pp > 1 is not supported (the pipeline schedule runs the backward "
                              "without a loss scale); use bf16")
        if schedule == "1f1b" and m < pp:
            raise LayoutError(f"1F1B needs at least as many micro-batches as stages ({m} < pp {pp}); "
                              "raise microbatches or use pp_schedule gpipe")
    if tp > 1 or pp > 1:
        if strategy.startswith("zero"):
            raise LayoutError(f"strategy {strategy} (DeepSpeed ZeRO) does not combine with tp/pp here; "
                              "use ddp or fsdp-full/fsdp-grad-op (FSDP2 over the data-parallel ranks)")
        if strategy.startswith("fsdp") and pp > 1:
            raise LayoutError(f"strategy {strategy} with pp > 1 is not supported; use ddp with pipeline stages")
        if _bool(p.get("compile", False)):
            raise LayoutError("compile with tp/pp is not supported here")
        if float(p.get("sparsity") or 0.0) > 0:
            raise LayoutError("sparsity with tp/pp is not supported (ddp without model parallelism only)")
    if tp > 1:
        if float(p.get("dropout") or 0.0) > 0:
            raise LayoutError("dropout with tp > 1 is not supported (ranks of a tensor-parallel group would "
                              "draw different masks on replicated activations)")
        if n_head is not None and n_head % tp:
            raise LayoutError(f"{n_head} attention heads are not divisible by tp {tp}")
        seq = _int(p, "seq_len", 0)
        if sp and seq and seq % tp:
            raise LayoutError(f"sequence_parallel: seq_len {seq} is not divisible by tp {tp}")
    if n_layer is not None and pp > n_layer:
        raise LayoutError(f"pp {pp} stages for {n_layer} layers: at most one stage per layer")
    if world % (tp * pp * cp):
        raise LayoutError(f"{world} rank(s) are not a multiple of tp x pp x cp = {tp} x {pp} x {cp}")
    return Layout(tp=tp, pp=pp, dp=world // (tp * pp * cp), cp=cp, microbatches=m, sequence_parallel=sp,
                  checkpointing=ac, schedule=schedule)


def _check_context_parallel(p: Mapping[str, Any], cp: int, tp: int, pp: int, strategy: str) -> None:
    if tp > 1 or pp > 1:
        raise LayoutError(f"cp {cp} with tp {tp} / pp {pp}: context parallel runs with data parallel only here "
                          "(tp 1, pp 1)")
    if strategy.startswith("zero"):
        raise LayoutError(f"strategy {strategy} (DeepSpeed ZeRO) does not combine with cp here; use ddp or "
                          "fsdp-full/fsdp-grad-op")
    seq = _int(p, "seq_len", 0)
    if seq and seq % cp:
        raise LayoutError(f"seq_len {seq} is not divisible by cp {cp} (each rank holds seq_len / cp tokens)")
    if _bool(p.get("compile", False)):
        raise LayoutError("compile with cp is not supported here")
    if float(p.get("sparsity") or 0.0) > 0:
        raise LayoutError("sparsity with cp is not supported (ddp without model parallelism only)")


def stage_bounds(n_layer: int, pp: int) -> list[tuple[int, int]]:
    """Blocks [lo, hi) of each pipeline stage: as even as possible, the earlier stages one block
    more when the layers do not divide (the last stage also holds the head and the loss)."""
    base, extra = divmod(n_layer, pp)
    bounds, lo = [], 0
    for i in range(pp):
        hi = lo + base + (1 if i < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds
