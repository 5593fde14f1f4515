"""Planning benchmark (issue 15): `orch plan` of a 20,000-run sweep, new code against old.

    .venv/bin/python benchmarks/bench_plan.py [--runs 20000|1000] [--rounds 3] [--baseline REV] [--old-table]
                                              [--profile]

Runs the real CLI in fresh processes, each in a temporary ORCH_HOME, and prints the wall
and CPU seconds (user + system of the process, start-up included) of:

- ``dry-run --json``: expand, resolve, render every script, list every run as JSON;
- ``dry-run``: the same with what a person sees (a summary; the code before the summary
  drew a table row per run, measured once with --old-table: it takes about a minute);
- ``recorded --json``: into an empty SQLite database (made beforehand by ``orch db upgrade``,
  timed apart: the schema is made once per project), with every run directory written (after
  ``sync`` and 3 s, and with earlier rounds' directories left in place until the end: see
  benchmarks/RESULTS.md for what mass deletion just before does to file creation here);
- ``re-plan --json``: the same sweep again (nothing new to record).

Old and new alternate, round by round, so both see the same load on a shared machine; the
old code is the commit before this benchmark was added (or --baseline), unpacked with
``git archive`` into a temporary directory and run with the same interpreter. Both must
plan the same runs (the benchmark compares their listings). The load average is printed
beside the figures; CPU time is the figure to compare. --profile prints cProfile's top
items for the new dry run (in this process).

Goals (issue 15): <= 2 s for the dry run and <= 6 s recorded, on a 2-core machine. Issue 46
traded speed for plain code (Jinja per run, json.dumps): at most 5 s of CPU for 20,000 runs and
0.5 s for 1,000 (``--runs 1000``: a campaign's size; the planning beyond start-up, which is the
``db upgrade`` line's CPU, start-up and the schema alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# 8 sites x 5 device counts x 3 precisions x 3 strategies x 4 batch sizes x 2 sequence
# lengths x 3 models x 2 = 17,280 GenSLM runs, and 5 sites x 2 x 2 x 4 x 3 x 4 x 3 repeats =
# 2,880 GEMMs: 20,160 runs, about a quarter skipped (precision, capacity, predicted memory).
# Both workloads predict memory by formula: gpt2's prediction traces the model on fake
# tensors (orchestrator/predict/memory_trace.py, cached per shape on disk), a cost of its own.
SWEEP = """\
name: bench-plan
experiments:
  - name: genslm-grid
    workload: genslm
    sites: [polaris, baskerville, baskerville:a100_80, dawn, jade2, stanage:a100, cosma8:mi100, local]
    walltime: "01:00:00"
    grid:
      devices: [1, 2, 4, 8, 16]
      precision: [fp32, bf16, fp16]
      strategy: [ddp, fsdp-full, zero2]
      batch_size: [1, 2, 4, 8]
      seq_len: [512, 1024]
      model: [gpt2, gpt2-medium, gpt2-xl]
      grad_accum: [1, 2]
  - name: gemm-sizes
    workload: gemm
    sites: [polaris, baskerville, dawn, jade2, local]
    grid:
      devices: [1, 4]
      precision: [fp32, bf16]
      m: [1024, 4096, 8192, 16384]
      n: [1024, 4096, 16384]
      k: [1024, 4096, 8192, 16384]
      repeats: 3
"""
# 4 sites x 4 device counts x 2 precisions x 2 strategies x 4 batch sizes x 2 sequence lengths x
# 2 accumulations = 1,024 GenSLM runs: a campaign's size (issue 46).
SWEEP_1000 = """\
name: bench-plan-1000
experiments:
  - name: genslm-grid
    workload: genslm
    sites: [polaris, baskerville, dawn, jade2]
    walltime: "01:00:00"
    grid:
      devices: [1, 2, 4, 8]
      precision: [bf16, fp16]
      strategy: [ddp, fsdp-full]
      batch_size: [1, 2, 4, 8]
      seq_len: [512, 1024]
      grad_accum: [1, 2]
"""
ENV = {"ORCH_ACCOUNT": "proj1", "ORCH_QOS": "normal"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def baseline_commit() -> str:
    """The commit before the one that added this benchmark (HEAD when it is not committed yet)."""
    added = git("log", "--diff-filter=A", "--format=%H", "--", "benchmarks/bench_plan.py").splitlines()
    return git("rev-parse", f"{added[-1]}^") if added else git("rev-parse", "HEAD")


def table_commit() -> str:
    """The commit before `orch plan` printed a summary for large plans (the old table per run)."""
    # Searched in the history before the stage packages (orchestrator/cli.py then).
    added = git("log", "--format=%H", "-S", "from orchestrator.plansummary import", "--",
                "orchestrator/cli.py").splitlines()
    return git("rev-parse", f"{added[-1]}^")


def unpack(rev: str, where: Path) -> Path:
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def run(tree: Path, home: Path, args: list[str], out: Path | None = None) -> tuple[float, float]:
    """``orch ARGS`` from ``tree``: (wall s, CPU s of the process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ENV, ORCH_HOME=str(home), PYTHONPATH=str(tree), COLUMNS="200")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(out or os.devnull, "w") as sink:
        proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=home.parent, env=env,
                              stdout=sink, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"orch {' '.join(args)} from {tree} exited {proc.returncode}:\n{proc.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def same_runs(old: Path, new: Path) -> str:
    """Whether both listings hold the same runs with the same placement and reasons."""
    def rows(path: Path) -> dict[str, dict[str, object]]:
        return {r["run_id"]: r for r in json.loads(path.read_text())["runs"]}

    a, b = rows(old), rows(new)
    columns = sorted(set(next(iter(a.values()))) & set(next(iter(b.values()))))  # newer code lists more
    differ = [k for k in a if k not in b or any(a[k][c] != b[k][c] for c in columns)]
    if a.keys() == b.keys() and not differ:
        return f"same {len(a)} runs (same {', '.join(columns)})"
    return f"DIFFERENT: {len(a)} vs {len(b)} runs, {len(differ)} listed differently (e.g. {differ[:3]})"


def profile(top: int) -> None:
    import cProfile
    import pstats

    from orchestrator.plan.record import plan_sweep
    from orchestrator.plan.sweep import parse_sweep

    with tempfile.TemporaryDirectory(prefix="orch-bench-plan-") as tmp:
        sweep = Path(tmp) / "sweep.yaml"
        sweep.write_text(SWEEP)
        os.environ.update(ENV)
        profiler = cProfile.Profile()
        profiler.enable()
        plans = plan_sweep(parse_sweep(sweep), Path(tmp) / "runs")
        profiler.disable()
    print(f"\ncProfile of plan_sweep, {len(plans)} runs (dry run, in this process):")
    stats = pstats.Stats(profiler).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, choices=(20000, 1000), default=20000,
                        help="the 20,160-run sweep (default) or the 1,024-run one")
    parser.add_argument("--baseline", help="the old code's revision (default: the commit before this benchmark; "
                        "its default output, --old-table, from the commit before the summary)")
    parser.add_argument("--old-table", action="store_true", help="also time, once, the default output of the "
                        "code before the summary (a table row per run: about a minute of CPU)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top items for the new dry run")
    opts = parser.parse_args()
    if opts.profile:
        profile(25)
        return

    rev = opts.baseline or baseline_commit()
    print(f"date {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.node()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"new: {REPO} (HEAD {git('rev-parse', '--short', 'HEAD')}"
          f"{', uncommitted changes' if git('status', '--porcelain', '--untracked-files=no') else ''}); "
          f"old: {git('rev-parse', '--short', rev)} ({git('log', '-1', '--format=%s', rev)[:70]})")
    with tempfile.TemporaryDirectory(prefix="orch-bench-plan-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"old": unpack(rev, tmp / "old-code"), "new": REPO}
        if opts.old_table:  # the old default output: a table row per run (before the summary)
            table_rev = opts.baseline or table_commit()
            table_home = tmp / "home-table" / ".orch"
            table_home.parent.mkdir()
            sweep_for_table = tmp / "sweep.yaml"
            sweep_for_table.write_text(SWEEP)
            loads_table = load()
            wall, cpu = run(unpack(table_rev, tmp / "table-code"), table_home,
                            ["plan", "--dry-run", str(sweep_for_table)])
            print(f"  old default output ({git('rev-parse', '--short', table_rev)}: a table row per run) "
                  f"dry-run  wall {wall:6.2f} s  CPU {cpu:6.2f} s  (load {loads_table})", flush=True)
        sweep = tmp / "sweep.yaml"
        sweep.write_text(SWEEP if opts.runs == 20000 else SWEEP_1000)
        modes = [("dry-run --json", ["plan", "--dry-run", "--json", str(sweep)], False),
                 ("dry-run", ["plan", "--dry-run", str(sweep)], False),
                 ("recorded --json", ["plan", "--json", str(sweep)], True),
                 ("re-plan --json", ["plan", "--json", str(sweep)], False)]
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        loads: list[str] = []
        for round_ in range(opts.rounds):
            for which in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                home = tmp / f"home-{which}-{round_}" / ".orch"
                home.parent.mkdir()
                wall, cpu = run(trees[which], home, ["db", "upgrade"])
                figures.setdefault(("db upgrade", which), []).append((wall, cpu))
                for mode, args, _fresh in modes:
                    if mode == "dry-run" and which == "old":
                        continue  # the old code's table: --old-table
                    out = tmp / f"{which}.json" if mode == "dry-run --json" and round_ == 0 else None
                    if _fresh:  # earlier rounds' writes flushed, so this plan pays only for its own
                        os.sync()
                        time.sleep(3)
                    loads.append(load())
                    wall, cpu = run(trees[which], home, args, out)
                    figures.setdefault((mode, which), []).append((wall, cpu))
                    print(f"  round {round_ + 1} {which:3} {mode:16} wall {wall:6.2f} s  CPU {cpu:6.2f} s  "
                          f"(load {loads[-1]})", flush=True)
                # Kept until the end: deleting 20,160 run directories here would make the next
                # recorded plan pay for it (this VM's ext4 discards online: file creation right after
                # mass deletion costs 5-10x the system time), which no user re-planning sees.
            if round_ == 0:
                print(f"  check: {same_runs(tmp / 'old.json', tmp / 'new.json')}")

    count = "20,160" if opts.runs == 20000 else "1,024"
    print(f"\nmedians of {opts.rounds} round(s), {count} runs; load average (1/5/15 min) from "
          f"{loads[0]} to {loads[-1]}:")
    print(f"{'':18} {'old wall':>9} {'old CPU':>8} {'new wall':>9} {'new CPU':>8} {'CPU old/new':>12}")
    for mode, _args, _fresh in [("db upgrade", [], True), *modes]:
        new = figures[(mode, "new")]
        old = figures.get((mode, "old"))
        new_wall, new_cpu = statistics.median(w for w, _ in new), statistics.median(c for _, c in new)
        if old:
            old_wall, old_cpu = statistics.median(w for w, _ in old), statistics.median(c for _, c in old)
            print(f"{mode:18} {old_wall:8.2f}s {old_cpu:7.2f}s {new_wall:8.2f}s {new_cpu:7.2f}s "
                  f"{old_cpu / new_cpu:11.1f}x")
        else:
            print(f"{mode:18} {'':>9} {'':>8} {new_wall:8.2f}s {new_cpu:7.2f}s")


if __name__ == "__main__":
    main()
