"""What every workload shares: command line, device, precision, launcher, timing, metrics file.

Submodules: ``cli`` (argparse from the registry), ``device`` (cpu/cuda/xpu/hpu),
``precision`` (fp32/tf32/fp16/bf16/fp8 and refusals), ``dist`` (torchrun, Slurm,
PBS/PALS, Open MPI launch variables -> process group), ``timing`` (warm-up,
synchronised per-step times, percentiles), ``envinfo`` (provenance),
``metrics`` (the ``orch.metrics/1`` document, written atomically), ``energy`` (the device's
energy counter over the timed steps, or none) and ``session`` (ties them together for one run).

``Session`` and ``run_workload`` are imported from ``session`` on first use, not with this
package: ``cli``, ``metrics`` and ``errors`` need no torch, and the site probe
(``workloads/probe.py``) imports them on nodes where torch may be missing, to say so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workloads.harness.errors import EXIT_REFUSED, Refused

if TYPE_CHECKING:
    from workloads.harness.session import Session, run_workload

__all__ = ["EXIT_REFUSED", "Refused", "Session", "run_workload"]


def __getattr__(name: str) -> Any:
    if name in ("Session", "run_workload"):
        from workloads.harness import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
