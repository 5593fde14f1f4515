"""`orch predict`'s memory: each ranked layout asks the run's one memory model (run_memory.py).

A layout becomes the gpt2 run that would measure it (its values, as ``ranking.gpt2_values`` writes
them, plus the model, devices, precision, micro-batch and accumulation), and its memory is what
`orch plan` would predict for that run: the trace where one exists, the formula where none does.
Layouts the gpt2 workload refuses (2D tensor parallel, heads that tp does not divide, ...) cannot
be traced: the same workload formula (``formulas.py``, ``memory.gpt_training``) serves them, 2D
tensor parallel counted as 1D over the same tp ranks with sequence parallel (states and
activations split tp ways alike). So the plan's ``mem_gb``, a memory skip's figure and this
command's ``memory_gb`` (tensors + the device's fixed cost, as the skip adds it) are one number.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from orchestrator.predict import memory, run_memory
from orchestrator.predict.perfmodel.layout import Layout
from orchestrator.predict.perfmodel.machine import Machine
from orchestrator.predict.perfmodel.transformer import Estimate
from workloads.models.configs import GPTConfig

# FSDP2 over the data-parallel ranks is what the gpt2 workload runs beside tp or cp where DeepSpeed
# cannot; in the model it is the same stage (perfmodel/layout.py: ZERO_STAGE).
FSDP_FOR_ZERO = {"zero2": "fsdp-grad-op", "zero3": "fsdp-full"}

Gpt2 = Callable[[Estimate], "tuple[dict[str, Any] | None, str | None]"]


def layout_values(lay: Layout, micro_batches: int) -> dict[str, Any]:
    """The gpt2 sweep values of ``lay``'s parallelism (strategy, tp, pp, cp, recompute)."""
    strategy = lay.strategy
    if (lay.tp > 1 or lay.cp > 1) and lay.pp == 1:
        strategy = FSDP_FOR_ZERO.get(strategy, strategy)
    values: dict[str, Any] = {"strategy": strategy}
    if lay.tp > 1:
        values.update(tp=lay.tp, sequence_parallel=True)  # the model's 1D tensor parallel runs with it
    if lay.pp > 1:
        values.update(pp=lay.pp, microbatches=micro_batches)
    if lay.cp > 1:
        values["cp"] = lay.cp
    if lay.recompute:
        values["activation_checkpointing"] = "full"
    return values


def run_of(e: Estimate, model: str, precision: str, seq_len: int) -> dict[str, Any]:
    """The whole gpt2 run of estimate ``e`` (over the workload's defaults): each replica's micro-batch
    of ``e.micro_batch`` sequences, ``e.micro_batches`` of them (the pipeline's, else accumulated)."""
    values = {**layout_values(e.layout, e.micro_batches), "model": model, "devices": e.layout.devices,
              "precision": precision, "seq_len": seq_len, "batch_size": e.micro_batch}
    if e.layout.pp == 1 and e.micro_batches > 1:
        values["grad_accum"] = e.micro_batches
    return run_memory.run_values("gpt2", values)


def _prefetch(runs: list[dict[str, Any]]) -> None:
    """Trace every missing leaf of ``runs`` side by side first (as `orch plan` does), not one by one."""
    wanted = [i for i in (memory.traced_inputs("gpt2", v) for v in runs) if i is not None]
    try:
        memory.prefetch(wanted, memory.trace_workers())
    except ValueError:  # a bad $ORCH_TRACE_WORKERS: each run traced here instead
        pass


def _formula(values: dict[str, Any], config: GPTConfig | None, untraced: str) -> tuple[int, str]:
    """The workload's formula for ``values``, with ``config``'s shape where the model is no preset."""
    if config is not None:
        return memory.gpt_training(values, config=config), untraced
    return int(run_memory.formula_bytes("gpt2", values) or 0), memory.FROM_FORMULA


def with_run_memory(estimates: list[Estimate], machine: Machine, *, model: str, precision: str, seq_len: int,
                    gpt2: Gpt2, config: GPTConfig | None = None,
                    untraced: str = memory.FROM_FORMULA) -> list[Estimate]:
    """``estimates`` with their memory from the run's own model, re-ranked as ``search.rank`` ranks
    (those that fit first, fastest first, then the least memory). ``config``: the shape of a model
    that is no gpt2 preset (`orch predict`'s custom shapes, GPT-3 175B/1T): nothing to trace, the
    formula with that shape, its memory_from ``untraced``."""
    runs = [run_of(e, model, precision, seq_len) for e in estimates]
    runnable = [config is None and gpt2(e)[0] is not None for e in estimates]
    _prefetch([v for v, ok in zip(runs, runnable) if ok])
    out: list[Estimate] = []
    for e, values, ok in zip(estimates, runs, runnable):
        found = run_memory.run_bytes("gpt2", values) if ok else None
        if found is None:
            found = _formula(values, config, untraced)
        tensors_gb = found[0] / 1e9
        total = tensors_gb + machine.fixed_memory_gb
        out.append(replace(e, memory_gb=total, fits=machine.memory_gb is None or total <= machine.memory_gb,
                           memory_parts={"tensors": tensors_gb, "fixed": machine.fixed_memory_gb},
                           memory_from=found[1]))
    return sorted(out, key=lambda e: (not e.fits, round(e.step_s, 9), e.memory_gb))
