"""Does `orch calibrate` make the time model better on shapes it has not seen? (issue 11)

A tiny local gpt2 sweep (sweep A: several model sizes, batches, sequence lengths, 1 and 2
processes) runs through `orch run`; `orch calibrate --sweep A` fits the local CPU's efficiency
factors; a second sweep of NEW shapes (sweep B) is planned (with the fitted factors) and run.
Printed: the mean step-time error |predicted - measured| / measured of sweep B with the
default factors and with the fitted ones (it must go down), and the prediction_error view's
step_error of each sweep as stored at plan time (A: defaults, B: calibrated).

    nice -n 19 .venv/bin/python -m benchmarks.bench_calibrate [--keep DIR]
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

REPO = Path(__file__).resolve().parents[1]

COMMON = "precision: fp32, vocab_size: 256, warmup: 2, iters: 10"
SWEEP_A = f"""\
name: calib-a
experiments:
  - name: one
    workload: gpt2
    sites: [local]
    walltime: "00:10:00"
    zip:
      shape: {{model: [tiny, tiny, gpt-micro, gpt-mini, gpt-mini], batch_size: [2, 8, 4, 2, 8],
               seq_len: [64, 128, 64, 128, 32]}}
    grid: {{devices: 1, {COMMON}}}
  - name: two
    workload: gpt2
    sites: [local]
    walltime: "00:10:00"
    zip:
      shape: {{model: [tiny, gpt-mini], batch_size: [4, 2], seq_len: [64, 64]}}
    grid: {{devices: 2, strategy: ddp, {COMMON}}}
"""
SWEEP_B = f"""\
name: calib-b
experiments:
  - name: one
    workload: gpt2
    sites: [local]
    walltime: auto
    zip:
      shape: {{model: [gpt-nano, gpt-micro, gpt-mini, tiny], batch_size: [4, 8, 4, 16], seq_len: [96, 128, 96, 32]}}
    grid: {{devices: 1, {COMMON}}}
  - name: two
    workload: gpt2
    sites: [local]
    walltime: auto
    zip:
      shape: {{model: [gpt-micro, tiny], batch_size: [2, 8], seq_len: [128, 32]}}
    grid: {{devices: 2, strategy: ddp, {COMMON}}}
"""


def orch(*args: str, cwd: Path, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True)
    if proc.returncode and not check:  # `orch run` exits 1 when a run failed: the others still count
        print(f"note: orch {args[0]} exited {proc.returncode}: a run failed; calibration uses the completed ones")
    elif proc.returncode:
        raise SystemExit(f"orch {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def view_error(cwd: Path, sweep: str) -> float:
    rows = json.loads(orch("sql", "-f", "json", f"SELECT step_error FROM prediction_error WHERE sweep = '{sweep}'",
                           cwd=cwd))
    errors = [abs(r["step_error"]) for r in rows if r["step_error"] is not None]
    return sum(errors) / len(errors) if errors else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="work in this directory (kept) instead of a temporary one")
    parser.add_argument("--analyse-only", action="store_true",
                        help="print the errors of the sweeps already run in --keep")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="orch-calib-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "a.yaml").write_text(SWEEP_A)
    (work / "b.yaml").write_text(SWEEP_B)
    t0 = time.perf_counter()
    if not args.analyse_only:
        orch("run", str(work / "a.yaml"), cwd=work, check=False)
        print(f"sweep A: {time.perf_counter() - t0:.0f} s")
        print(orch("calibrate", "--sweep", "calib-a", cwd=work))
        t0 = time.perf_counter()
        orch("run", str(work / "b.yaml"), cwd=work, check=False)
        print(f"sweep B (new shapes, walltime: auto): {time.perf_counter() - t0:.0f} s")

    sys.path.insert(0, str(REPO))
    os.chdir(work)
    from orchestrator import paths
    from orchestrator.predict.calibrate import samples_by_site
    from orchestrator.predict.perfmodel.calibration import efficiency_for, mean_abs_error
    from orchestrator.results.db.engine import open_engine

    engine = open_engine(paths.default_db_url())
    for target, (machine, samples) in samples_by_site(engine, sweep="calib-b").items():
        fitted = efficiency_for(machine, work / ".orch")
        before = mean_abs_error(samples)
        after = mean_abs_error(samples, fitted)
        print(f"sweep B on {target}, {len(samples)} runs of shapes sweep A did not have:")
        print(f"  mean step-time error, default factors: {before:.1%}")
        print(f"  mean step-time error, calibrated on sweep A: {after:.1%}")
        print(f"  {'LOWER' if after < before else 'NOT LOWER'} after calibration")
    print(f"prediction_error view, mean |step_error| as planned: sweep A (defaults) {view_error(work, 'calib-a'):.1%}, "
          f"sweep B (calibrated) {view_error(work, 'calib-b'):.1%}")
    print(f"work directory: {work}")


if __name__ == "__main__":
    main()
