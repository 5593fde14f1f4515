"""The trainer a gpt2 layout runs: one place that chooses.

Context parallel (``workloads/context.py``), pipeline and tensor parallel (``workloads/parallel.py``)
each wrap a data-parallel strategy of ``workloads/strategies.py``; choosing among them here, above
all three, keeps the choice in one module and lets none of them import another back.
"""

from __future__ import annotations

from workloads import context, parallel, strategies
from workloads.harness import Session
from workloads.layouts import Layout
from workloads.models.configs import GPTConfig
from workloads.strategies import Trainer


def build(session: Session, strategy: str, cfg: GPTConfig, *, lr: float, batch: int, accum: int,
          compile_: bool = False, layout: Layout | None = None) -> Trainer:
    """The trainer for ``strategy`` under ``layout`` (None or a plain data-parallel layout: the strategy alone)."""
    if layout is not None and layout.cp > 1:
        return context.build(session, strategy, cfg, layout, lr, batch, accum)  # type: ignore[return-value]
    if layout is not None and layout.model_parallel:
        if layout.pp > 1:
            return parallel.build_pipeline(session, strategy, cfg, layout, lr)  # type: ignore[return-value]
        return parallel.build_tensor_parallel(session, strategy, cfg, layout, lr)  # type: ignore[return-value]
    return strategies.build(session, strategy, cfg, lr=lr, batch=batch, accum=accum, compile_=compile_)
