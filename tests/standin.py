"""A stand-in for a site's python: the job runs it in place of a workload, and it writes the
metrics the test chose (a metrics file as a workload writes it), so a test sets the figures the
views and the report then compute from."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import write

SCRIPT = """#!{python}
import json, sys
args = sys.argv[1:]
spec = json.load(open("spec.json"))
iters = int(spec["params"].get("iters", 1))
device_type = {device_type!r}
{compute}
json.dump({{"schema": "orch.metrics/1", "workload": spec["workload"], "precision": "fp32",
           "world_size": spec["devices"], "device": {{"type": device_type, "model": "stand-in",
           "count": spec["devices"]}}, "metrics": metrics, "timing": timing}},
          open(args[args.index("--output") + 1], "w"))
"""


def stand_in_python(workdir: Path, compute: str, device_type: str = "cpu") -> Path:
    """Write the stand-in (``compute``: Python lines that set ``metrics`` and ``timing`` from
    ``spec`` and ``iters``) and return its path, for a site profile's ``python:``."""
    path = write(workdir / "stand-in", SCRIPT.format(python=sys.executable, compute=compute, device_type=device_type))
    path.chmod(0o755)
    return path
