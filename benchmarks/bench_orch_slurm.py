"""orch end to end on the sandbox Slurm: 1,000 trivial runs from sweep file to DB rows.

    .venv/bin/python benchmarks/bench_orch_slurm.py [--runs 1000] [--interval 2]

Brings the sandbox up (root), plans a sweep of --runs runs on a site that is the sandbox
with a stand-in program (writes a valid metrics file and exits), then times
`orch submit` and `orch status --watch` as real processes and prints the sbatch and
sacct calls they made and the wall time from submit to every row in the results view.
(bench_slurm_1000.py measures the Slurm executor alone, without the database.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.sites import sandbox  # noqa: E402

STAND_IN = """#!{python}
import json, sys
a = sys.argv[1:]
json.dump({{"schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 1,
           "device": {{"type": "cpu", "model": "sandbox-cpu", "count": 1}}, "metrics": {{"tflops": 1.0}},
           "timing": {{"warmup_steps": 0, "timed_steps": 1}}}}, open(a[a.index("--output") + 1], "w"))
"""

SITE = """name: trivial
scheduler: slurm
python: {python}
max_nodes: 4
device: {{type: cpu, model: sandbox-cpu, per_node: 2, precisions: [fp32]}}
queues: [{{name: debug, max_nodes: 4, max_walltime: "01:00:00"}}]
launcher: {{name: srun}}
executor: {{max_array_size: 1000}}
"""


def orch(workdir: Path, *args: str) -> dict:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ORCH_")},
           "ORCH_SITES_PATH": str(workdir / "sites")}
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=workdir, env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out) if out.strip().startswith(("{", "[")) else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args()
    sandbox.up()
    workdir = Path(tempfile.mkdtemp(prefix="orch-bench-"))
    (workdir / "sites").mkdir()
    stand_in = workdir / "stand-in"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    (workdir / "sites" / "trivial.yaml").write_text(SITE.format(python=stand_in))
    sizes = ", ".join(str(i) for i in range(1, args.runs + 1))
    (workdir / "sweep.yaml").write_text(f"name: bench\nexperiments:\n  - name: trivial\n    workload: gemm\n"
                                        f"    sites: [trivial]\n    walltime: '00:10:00'\n    grid:\n"
                                        f"      m: [{sizes}]\n")
    t0 = time.perf_counter()
    orch(workdir, "plan", "sweep.yaml", "--json")
    t_plan = time.perf_counter() - t0
    t1 = time.perf_counter()
    submitted = orch(workdir, "submit", "--json")
    t_submit = time.perf_counter() - t1
    status = orch(workdir, "status", "--watch", "--interval", str(args.interval), "--json")
    t_all = time.perf_counter() - t1
    rows = orch(workdir, "sql", "-f", "json", "SELECT count(*) AS n FROM results WHERE status = 'completed'")
    print(f"runs={args.runs} plan_s={t_plan:.1f} submit_s={t_submit:.1f} "
          f"sbatch_calls={submitted['scheduler_calls'].get('sbatch', 0)} "
          f"polls={status['polls']} sacct_calls={status['scheduler_calls'].get('sacct', 0)} "
          f"squeue_calls={status['scheduler_calls'].get('squeue', 0)} "
          f"submit_to_all_rows_s={t_all:.1f} rows_in_results={rows[0]['n']} counts={status['counts']}")


if __name__ == "__main__":
    main()
