"""A PBS site on this machine (the emulator) whose "python" is a stand-in: each run writes a valid
metrics file at once and appends its job id to ``executions.log`` in its run directory, so tests
and the fault trials (benchmarks/fault_trials_pbs.py) can count how many times a run executed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

TRIVIAL_PYTHON = """#!{python}
# Stands in for `python -m workloads.X ...`: writes a valid metrics file, optionally after a nap.
import json, os, sys, time
args = sys.argv[1:]
def arg(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default
with open("executions.log", "a") as log:  # one line per time this run's program ran
    log.write(os.environ.get("PBS_JOBID", "?") + "\\n")
time.sleep(float(os.environ.get("TRIVIAL_SLEEP", "0")))
json.dump({{"schema": "orch.metrics/1", "workload": "gemm", "precision": arg("--precision", "fp32"),
           "world_size": 1, "device": {{"type": "cpu", "model": "pbs-cpu", "count": 1}},
           "params": {{"m": int(arg("--size-m", "1"))}}, "metrics": {{"tflops": 1.0 + int(arg("--size-m", "1"))}},
           "timing": {{"warmup_steps": 0, "timed_steps": 1}}}}, open(arg("--output"), "w"))
"""

SITE = """\
name: pbstrivial
description: the PBS emulator with a stand-in python (tests)
scheduler: pbs
python: {python}
max_nodes: 1
device: {{type: cpu, model: pbs-cpu, per_node: 1, precisions: [fp32]}}
queues: [{{name: workq, max_nodes: 1, max_walltime: "01:00:00"}}]
env: {{TRIVIAL_SLEEP: "{sleep}"}}
executor: {{max_array_size: {array_size}, qsub_args: {qsub_args}}}
"""


def sweep_text(name: str, count: int) -> str:
    sizes = ", ".join(str(i) for i in range(1, count + 1))
    return (f"name: {name}\nexperiments:\n  - name: many\n    workload: gemm\n    sites: [pbstrivial]\n"
            f"    walltime: '00:05:00'\n    grid:\n      m: [{sizes}]\n")


def make_site(workdir: Path, sleep: float = 0.0, array_size: int = 2, qsub_args: tuple[str, ...] = ()) -> Path:
    """The site profile under ``workdir/sites`` and its stand-in python; returns the sites folder."""
    fake = workdir / "fake-python"
    fake.write_text(TRIVIAL_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    sites = workdir / "sites"
    sites.mkdir(parents=True, exist_ok=True)
    (sites / "pbstrivial.yaml").write_text(SITE.format(python=fake, sleep=sleep, array_size=array_size,
                                                         qsub_args=json.dumps(list(qsub_args))))
    return sites


def executions(workdir: Path) -> dict[str, int]:
    """Run directory name -> how many times its program ran."""
    return {p.parent.name: len(p.read_text().splitlines()) for p in workdir.rglob("executions.log")}
