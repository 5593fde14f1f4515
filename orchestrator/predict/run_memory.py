"""One memory model for a run: what `orch plan`, its skip decision, `orch predict` and the report ask.

Issue 25: `orch predict` had its own formula (perfmodel/transformer.py), the plan its trace, and
for one MPT-7B layout they said 96, 141 and 69 GB. Now every caller asks :func:`run_bytes` with the
run's values (the workload's defaults under the run's own): the program traced where it can be
(``memory.predicted``), the workload's formula (``formulas.py``) only where no trace exists
(pipeline stages, FSDP over a tensor-parallel mesh, no torch, ``ORCH_MEMORY_TRACE=0``). The same
values give the same bytes everywhere. No torch imported here.
"""

from __future__ import annotations

from typing import Any

from orchestrator.predict import memory
from orchestrator.predict.formulas import formula_for
from workloads import registry


def run_values(workload: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` over the workload's defaults: what the plan's models read (plan/resolve.py, _run_values)."""
    return {**registry.get(workload).defaults(), **values}


def run_bytes(workload: str, values: dict[str, Any]) -> tuple[int, str] | None:
    """Per-device peak tensor bytes of the run with ``values`` (already over the workload's
    defaults) and what they came from (``memory.FROM_*``), or None where the workload has no model."""
    formula = formula_for(workload)
    if formula is None:
        return None
    return memory.predicted(workload, values, formula)


def formula_bytes(workload: str, values: dict[str, Any]) -> int | None:
    """The workload's formula alone (no trace): for layouts its program cannot run, which no trace can follow."""
    formula = formula_for(workload)
    return None if formula is None else formula(values)
