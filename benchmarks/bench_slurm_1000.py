"""Submit and follow 1000 tiny runs on the sandbox Slurm cluster; count scheduler calls.

    python benchmarks/bench_slurm_1000.py [--runs 1000] [--shapes 1] [--poll 2] [--json out.json]

Brings the sandbox up (root), writes one rendered script per run under a temporary
folder, submits them through orch's SlurmExecutor (runs of one shape share one job
array, split at max_array_size), then follows all of them with batched ``query``
calls until every run has ended. Prints how long each part took and how many
``sbatch``/``sacct``/``squeue`` calls it needed: the point is that the number of
scheduler calls does not grow with the number of runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.run.executors.base import JobRequest, JobState  # noqa: E402
from orchestrator.run.executors.slurm import SlurmExecutor  # noqa: E402
from orchestrator.sites import sandbox  # noqa: E402


def make_requests(root: Path, runs: int, shapes: int) -> list[JobRequest]:
    reqs = []
    for i in range(runs):
        run_dir = root / f"run{i:05d}"
        run_dir.mkdir(parents=True)
        script = run_dir / "job.sh"
        script.write_text(
            "#!/bin/bash\n"
            "#SBATCH --time=00:02:00\n#SBATCH --ntasks=1\n#SBATCH --mem=50M\n"
            f"#SBATCH --output={run_dir}/slurm-%j.out\n"
            f'echo "{{\\"run\\": {i}}}" > {run_dir}/metrics.json\n'
        )
        reqs.append(JobRequest(
            run_id=f"bench{i:05d}", attempt=1, script_path=script, run_dir=run_dir,
            job_name=f"orch-bench{i:05d}-a1", walltime_s=120, nodes=1, tasks_per_node=1,
            shape_key=f"shape{i % shapes}",
        ))
    return reqs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--shapes", type=int, default=1, help="distinct shape keys (one array each)")
    ap.add_argument("--poll", type=float, default=2.0, help="seconds between queries")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--max-array-size", type=int, default=1000)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    st = sandbox.up()
    t_up = time.monotonic() - t0
    cpus = sum(1 for _ in st.nodes) * sandbox.FACTS["cpus_per_node"]

    with tempfile.TemporaryDirectory(prefix="orch-bench-slurm-") as tmp:
        root = Path(tmp)
        reqs = make_requests(root / "runs", args.runs, args.shapes)
        ex = SlurmExecutor(root / "sched", {"max_array_size": args.max_array_size})

        t1 = time.monotonic()
        submitted = ex.submit(reqs)
        ids = [i for i in submitted.job_ids if i]
        t_submit = time.monotonic() - t1
        if len(ids) < len(submitted.job_ids):
            print("not submitted:", dict(list(submitted.refused.items())[:3]), file=sys.stderr)
            return 1
        submit_calls = dict(ex.calls)

        t2 = time.monotonic()
        polls = 0
        query_times = []
        infos = {}
        while True:
            q0 = time.monotonic()
            infos = ex.query(ids)
            query_times.append(time.monotonic() - q0)
            polls += 1
            if all(i.ended for i in infos.values()):
                break
            if time.monotonic() - t2 > args.timeout:
                print("timed out following the runs", file=sys.stderr)
                break
            time.sleep(args.poll)
        t_follow = time.monotonic() - t2
        states = Counter(i.state.value for i in infos.values())
        metrics = sum(1 for r in reqs if (r.run_dir / "metrics.json").exists())

    result = {
        "runs": args.runs,
        "shapes": args.shapes,
        "cluster_cpus": cpus,
        "sandbox_up_s": round(t_up, 2),
        "submit_s": round(t_submit, 2),
        "submit_calls": submit_calls,
        "follow_s": round(t_follow, 1),
        "runs_per_s": round(args.runs / t_follow, 1) if t_follow else None,
        "polls": polls,
        "query_s_median": round(sorted(query_times)[len(query_times) // 2], 3),
        "query_s_max": round(max(query_times), 3),
        "calls_total": dict(ex.calls),
        "states": dict(states),
        "metrics_files": metrics,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    ok = states.get(JobState.COMPLETED.value, 0) == args.runs and metrics == args.runs
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
