"""What every workload shares: command line, device, precision, launcher, timing, metrics file.

Submodules: ``cli`` (argparse from the registry), ``device`` (cpu/cuda/xpu/hpu),
``precision`` (fp32/tf32/fp16/bf16/fp8 and refusals), ``dist`` (torchrun, Slurm,
PBS/PALS, Open MPI launch variables -> process group), ``timing`` (warm-up,
synchronised per-step times, percentiles), ``envinfo`` (provenance),
``metrics`` (the ``orch.metrics/1`` document, written atomically) and
``session`` (ties them together for one run).
"""

from workloads.harness.errors import EXIT_REFUSED, Refused
from workloads.harness.session import Session, run_workload

__all__ = ["EXIT_REFUSED", "Refused", "Session", "run_workload"]
