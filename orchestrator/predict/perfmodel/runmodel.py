"""A planned or measured run as the time model sees it: its model shape, layout and batch.

gpt2-like workloads (gpt2, and any workload with gpt2's ``model`` presets) get the transformer
model; ``gemm`` a single roofline; every other workload no time prediction (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from orchestrator.predict.perfmodel.layout import ZERO_STAGE, Layout
from orchestrator.predict.perfmodel.machine import Machine
from orchestrator.predict.perfmodel.transformer import BYTES, ModelShape, step_seconds
from workloads.layouts import micro_batches

GPT_WORKLOADS = {"gpt2": "gpt2", "genslm": "gpt2-xl"}  # workload -> its default model preset
MODELLED = frozenset({*GPT_WORKLOADS, "gemm"})  # the workloads the time model predicts
# Names a workload may give its layout parameters (the gpt2 workload's own, once it has them).
_TP = ("tensor_parallel", "tp")
_PP = ("pipeline_parallel", "pp")
# (The gpt2 workload's ``sequence_parallel`` is Megatron's, with tp, which the model always assumes;
# context parallel splits the sequence between ranks of its own.)
_CP = ("context_parallel", "cp")
_RECOMPUTE = ("activation_checkpointing", "checkpointing", "recompute")


@dataclass(frozen=True)
class RunModel:
    """What the model needs of a run: ``estimate(shape, layout, ...)``'s arguments, or a GEMM."""

    shape: ModelShape | None
    layout: Layout
    precision: str
    global_batch: int  # sequences per optimizer step, all replicas
    micro_batch: int
    gemm: tuple[int, int, int] | None = None

    def step_s(self, machine: Machine) -> float:
        """Predicted seconds of one timed step (a training step; one product for gemm)."""
        if self.gemm is not None:
            m, n, k = self.gemm
            eff, act = machine.efficiency, BYTES.get(self.precision, 4)
            compute = 2 * m * n * k / (machine.peak(self.precision) * 1e12 * eff.matmul)
            memory = (m * k + k * n + m * n) * act / (machine.bandwidth_gbs * 1e9 * eff.memory)
            return max(compute, memory) + eff.op_overhead_us * 1e-6
        assert self.shape is not None
        return step_seconds(self.shape, self.layout, machine, precision=self.precision, batch_size=self.micro_batch,
                            micro_batch=self.micro_batch, global_batch=self.global_batch)


def _first(values: Mapping[str, Any], names: tuple[str, ...], default: Any) -> Any:
    for name in names:
        value = values.get(name)
        if value not in (None, ""):
            return value
    return default


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes", "full")


def run_model(workload: str, values: Mapping[str, Any], *, devices: int, precision: str,
              strategy: str | None, batch_size: int | None, seq_len: int | None) -> RunModel | None:
    """The run as the model sees it, or None where the model does not apply (or cannot read a value)."""
    try:
        if workload == "gemm":
            return RunModel(None, Layout(dp=devices), precision, devices, 1,
                            gemm=(int(values["m"]), int(values["n"]), int(values["k"])))
        if workload not in GPT_WORKLOADS:
            return None
        from workloads.models.configs import SIZES

        model = str(values.get("model") or GPT_WORKLOADS[workload])
        cfg = SIZES[model]
        seq = int(seq_len or 1024)
        vocab = int(values.get("vocab_size") or 0) or (256 if values.get("tokenizer") == "char" else cfg.vocab_size)
        if workload == "genslm":
            vocab = 70  # codons + special tokens (workloads/genslm.py)
        tp, pp = int(_first(values, _TP, 1)), int(_first(values, _PP, 1))
        cp = int(_first(values, _CP, 1)) if not isinstance(_first(values, _CP, 1), bool) else 1
        if devices % (tp * pp * cp):
            return None
        strategy = strategy if strategy in ZERO_STAGE else "ddp"
        layout = Layout(dp=devices // (tp * pp * cp), tp=tp, pp=pp, cp=cp, strategy=strategy,
                        recompute=_truthy(_first(values, _RECOMPUTE, False)))
        micro = int(batch_size or 8)
        accum = max(1, int(values.get("grad_accum") or 1))
        shape = ModelShape(layers=cfg.n_layer, hidden=cfg.n_embd, heads=cfg.n_head, vocab=vocab, seq_len=seq,
                           fused_attention=str(values.get("attention") or "sdpa") != "manual",
                           positions=max(seq, int(values.get("block_size") or 0) or cfg.block_size))
        # Each replica (tp x pp x cp devices) runs m micro-batches of ``micro`` sequences a step
        # (tokens = batch x seq x m x dp), as the program counts them.
        m = micro_batches(pp, accum, int(values.get("microbatches") or 0))
        return RunModel(shape, layout, precision, micro * m * layout.dp, micro)
    except (KeyError, ValueError, TypeError):
        return None


def run_seconds(step_s: float, values: Mapping[str, Any]) -> float | None:
    """Predicted seconds of the timed and warm-up steps (``warmup`` + ``iters``; None by epochs)."""
    if int(values.get("epochs") or 0) > 0:
        return None
    try:
        steps = int(values.get("warmup", 5)) + int(values.get("iters", 20))
    except (TypeError, ValueError):
        return None
    return step_s * steps if math.isfinite(step_s) else None
