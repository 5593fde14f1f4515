"""Fault injection: hostile input and killed processes, counted. Not a test: it prints figures.

    .venv/bin/python benchmarks/bench_faults.py [--mutations 5000] [--kills 50] [--schedulers local,slurm,pbs]

Four parts, each a count whose goal is 0:

1. **Mutated sweeps.** Sweep files made from the examples by random mutation (hostile values
   at random places: huge and non-finite numbers, deep nesting, alias bombs, huge grids and
   repeats, lists for scalars, long names, NUL, option-like text; deleted, duplicated and
   garbled lines) go through ``orch plan FILE --dry-run`` in a forked copy of a warm orch
   process, each under a time and a memory limit. Counted: clean one-line errors (exit 2),
   accepted, **tracebacks**, **hangs**, **memory blow-ups** (past the memory limit), with the
   root causes of any traceback. A hang is judged by CPU time, never by wall time: past
   ``--time-limit`` CPU seconds (a loop, exponential work), or asleep with no CPU used for
   ``BLOCKED_LIMIT_S`` (a wait that never ends). The machine this runs on is shared and the
   benchmark runs at nice 19, so a child's wall time stretches with the load and with pauses
   (SIGSTOP) and says nothing about orch: the one "hang" in an earlier 1,000 was a file that
   orch refuses in 0.7 CPU s, killed at 120 s wall while the processes were paused.
2. **Injection corpus.** Shell-injection strings in every string field of a sweep and of user
   site profiles (local, Slurm and PBS): each accepted one is rendered and the script RUN
   with bash (the scheduler and launcher commands stubbed), and the sweep's string values
   go through a real ``orch run`` on the local site. Counted: **executions** (canary files
   created) and **values changed** on the way to the workload (the argv it received against
   the sweep's value).
3. **kill -9.** ``orch submit`` and ``orch status --watch`` killed at random points while a
   sweep runs on a scheduler, then followed to the end. Counted: runs **executed twice** and
   runs **lost**. A scheduler is one function in ``KILL_TRIALS``: local, slurm (the sandbox
   cluster, which must be up: `orch sandbox up`; benchmarks/fault_trials_slurm.py) and pbs (the
   emulator with qstat dropping operands; benchmarks/fault_trials_pbs.py).
4. **Failure classes.** On each scheduler of ``--schedulers``, one sweep whose program fails on
   cue in every class (exit code, no metrics, walltime, memory, cancelled, flaky under retry),
   followed to the end while the scheduler restarts (benchmarks/fault_classes.py). Counted:
   attempts **misclassified** and **false failures**.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


# ---------------------------------------------------------------- 1. mutated sweeps

DEEP = "\x00DEEP{}\x00"  # placeholder replaced after dumping (yaml.safe_dump cannot write 100,000 levels)


def _bomb(levels: int, width: int = 9) -> str:
    text = "&b0 [" + ", ".join(["lol"] * width) + "]"
    for i in range(1, levels):
        text = f"&b{i} [" + ", ".join([f"*b{i - 1}"] * width) + "]"
    return text


def _hostile_values(rng: random.Random) -> list[object]:
    return [
        2**63, 2**64, -2**63 - 1, 10**30, -1, 0, 1e308, float("nan"), float("inf"), float("-inf"),
        "", "-x", "--help", "a" * 300, "x" * rng.choice([20_000, 200_000]), "a\x00b", "gpu\n", "\n",
        "$(touch /tmp/orch-fuzz-canary)", "; rm -rf ~", "`id`", "'\"", "../../../etc/passwd", "a:b:c", "\u202e",
        None, True, False, [], {}, [[1]], [{"a": [1, 2]}], {"a": {"b": [1]}}, [1, "two", 3.0],
        list(range(rng.choice([10, 1000, 5000]))), DEEP.format(rng.choice([60, 1000, 100_000])),
        "1e3", ".nan", "00:00:00", "99:99:99", -10**9,
    ]


def _paths(data: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += _paths(value, prefix + (index,))
    return out


def _set(data: object, path: tuple, value: object) -> object:
    if not path:
        return value
    target = data
    for part in path[:-1]:
        target = target[part]  # type: ignore[index]
    target[path[-1]] = value  # type: ignore[index]
    return data


def mutate(seed_text: str, rng: random.Random) -> str:
    """One random mutation of a sweep file's text."""
    kind = rng.random()
    if kind < 0.55:  # a hostile value at a random place of the parsed document
        data = yaml.safe_load(seed_text)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            path = rng.choice(_paths(data))
            data = _set(data, path, rng.choice(_hostile_values(rng)))
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**6)
        for depth in (60, 1000, 100_000):
            token = DEEP.format(depth)
            text = text.replace(repr(token)[1:-1], "[" * depth + "]" * depth)
            text = text.replace(json.dumps(token)[1:-1], "[" * depth + "]" * depth)
        text = re.sub(r"['\"]?\\0DEEP(\d+)\\0['\"]?", lambda m: "[" * int(m[1]) + "]" * int(m[1]), text)
        return text
    if kind < 0.65:  # a huge grid or repeats
        data = yaml.safe_load(seed_text)
        exp = rng.choice(data.get("experiments") or [{}])
        grid = exp.setdefault("grid", {}) if isinstance(exp, dict) else {}
        if isinstance(grid, dict):
            if rng.random() < 0.5:
                grid["repeats"] = rng.choice([1000, 100_000, 1_000_000])
            else:
                for axis in ("m", "n", "k", "iters")[: rng.randint(2, 4)]:
                    grid[axis] = list(range(1, rng.choice([100, 1000]) + 1))
        return yaml.safe_dump(data, sort_keys=False, width=10**6)
    if kind < 0.72:  # an alias bomb somewhere
        levels = rng.choice([3, 6, 9, 12])
        lines = seed_text.splitlines()
        bomb = _bomb(levels)
        if rng.random() < 0.5:
            return f"x-bomb: {bomb}\n" + seed_text
        for i, line in enumerate(lines):
            if re.match(r"^\s+(tag|m|devices|precision):", line):
                lines[i] = re.sub(r":.*$", ": " + bomb, line)
                break
        return "\n".join(lines) + "\n"
    lines = seed_text.splitlines()  # textual damage
    for _ in range(rng.randint(1, 4)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        op = rng.random()
        if op < 0.25:
            del lines[i]
        elif op < 0.45:
            lines.insert(i, lines[i])
        elif op < 0.6:
            lines[i] = " " * rng.randint(0, 6) + lines[i].lstrip()
        elif op < 0.75:
            cut = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:cut] + rng.choice(["{", "[", "]", "}", ":", "- ", "&a", "*a",
                                                    "!!python/object:os.system",
                                                    "\t", "'", '"', "%", "@", "`", "|", ">"]) + lines[i][cut:]
        elif op < 0.9:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines = lines[:i]
    return "\n".join(lines) + "\n"


@dataclass
class MutationFigures:
    files: int = 0
    accepted: int = 0
    clean_errors: int = 0
    tracebacks: int = 0
    hangs: int = 0
    memory_blowups: int = 0
    other_exits: int = 0
    slowest_s: float = 0.0
    causes: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)
    slow_seeds: list = field(default_factory=list)
    hang_notes: list = field(default_factory=list)  # one per hang: its file, CPU and wall seconds


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


# A child that sleeps this long without using CPU is waiting for something that will not come.
BLOCKED_LIMIT_S = 120.0


def _state(pid: int) -> str:
    """The process's state letter (R running or runnable, S/D sleeping, T stopped, Z zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


class HangWatch:
    """CPU time and *blocked* time of one child, robust to a loaded, shared machine.

    Wall time says little here: at nice 19 a child may wait long for a core (state R), and the
    processes may be paused with SIGSTOP for minutes (state T) while someone takes quiet
    measurements. So a hang is (a) CPU time past the limit (a loop, exponential work), or (b)
    time asleep (state S or D) with no CPU used, past BLOCKED_LIMIT_S (a wait that never ends:
    a FIFO, a lock). Only intervals the watcher itself saw are counted, at most 1 s each, so a
    pause of the watcher adds nothing."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu = 0.0
        self.blocked = 0.0
        self.wall = 0.0
        self._last = time.monotonic()

    def update(self) -> None:
        now = time.monotonic()
        step = min(now - self._last, 1.0)
        self._last = now
        self.wall += step
        cpu = _cpu_seconds(self.pid)
        if cpu <= self.cpu and _state(self.pid) in ("S", "D"):
            self.blocked += step
        else:
            self.blocked = 0.0 if cpu > self.cpu + 0.05 else self.blocked
        self.cpu = max(cpu, self.cpu)

    def hung(self, time_limit: float) -> bool:
        return self.cpu > time_limit or self.blocked > BLOCKED_LIMIT_S

    def note(self) -> str:
        return f"{self.cpu:.1f} CPU s, {self.blocked:.0f} s blocked, {self.wall:.0f} s watched"


def _child_plan(path: Path, scratch: Path, out: Path) -> None:
    """In the forked child: run `orch plan PATH --dry-run` as the CLI would, output to files."""
    os.chdir(scratch)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = 0
    try:
        from orchestrator.cli import app as cli

        sys.argv = ["orch", "plan", str(path), "--dry-run", "--json"]
        cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a traceback is what is being counted
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run_limited(path: Path, scratch: Path, time_limit: float, memory_limit: int) -> str:
    """`orch plan PATH --dry-run` in a forked child under the limits: ok, error, hang or memory."""
    scratch.mkdir(parents=True, exist_ok=True)
    out = scratch / "out"
    pid = os.fork()
    if pid == 0:
        _child_plan(path, scratch, out)
    watch = HangWatch(pid)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "ok" if os.waitstatus_to_exitcode(status) == 0 else "error"
        watch.update()
        if watch.hung(time_limit):
            verdict = f"hang ({watch.note()})"
        elif _rss_bytes(pid) > memory_limit:
            verdict = f"over {memory_limit // 2**20} MB"
        else:
            time.sleep(0.05)
            continue
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return verdict


def mutation_trials(count: int, seed: int, time_limit: float, memory_limit: int, workers: int,
                    workdir: Path) -> MutationFigures:
    from orchestrator.cli import app as cli  # noqa: F401 - warm: every child starts with orch imported
    from orchestrator.plan.record import plan_sweep
    from orchestrator.plan.sweep import parse_sweep

    plan_sweep(parse_sweep(REPO / "examples" / "quickstart.yaml"), workdir / "warm")
    os.environ["ORCH_HOME"] = str(workdir / "orch-home")
    rng = random.Random(seed)
    figures = MutationFigures()
    files_dir = workdir / "mutants"
    files_dir.mkdir(parents=True, exist_ok=True)
    running: dict[int, tuple[Path, Path, float]] = {}
    cpu: dict[Path, float] = {}  # CPU seconds of each running child, last seen
    watches: dict[int, HangWatch] = {}
    produced = 0
    # Seeds: the examples that plan unmutated within the limits (one that does not is a finding
    # about planning speed, reported apart: its mutants would count its slowness as hangs).
    seeds: list[str] = []
    for example in EXAMPLES:
        check = _run_limited(example, workdir / "seed-check", time_limit, memory_limit)
        if check == "ok":
            seeds.append(example.read_text())
        else:
            figures.slow_seeds.append(f"{example.name}: {check} unmutated")

    def reap(pid: int, status: int | None, why: str | None) -> None:
        path, out, started = running.pop(pid)
        watches.pop(pid, None)
        figures.files += 1
        figures.slowest_s = max(figures.slowest_s, cpu.get(path, 0.0))
        text = out.read_text(errors="replace") if out.exists() else ""
        if why == "hang":
            figures.hangs += 1
            figures.examples.setdefault("hang", str(path))
            shutil.copy(path, workdir / f"hang-{figures.hangs}.yaml")
        elif why == "memory":
            figures.memory_blowups += 1
            figures.examples.setdefault("memory", str(path))
            shutil.copy(path, workdir / f"memory-{figures.memory_blowups}.yaml")
        else:
            code = os.waitstatus_to_exitcode(status) if status is not None else -1
            if "Traceback (most recent call last)" in text or "MemoryError" in text:
                figures.tracebacks += 1
                last = [line for line in text.splitlines() if line and not line.startswith(" ")][-1:]
                cause = re.sub(r"\d+", "N", (last or ["?"])[0])[:120]
                figures.causes[cause] += 1
                if cause not in figures.examples:
                    figures.examples[cause] = str(workdir / f"traceback-{len(figures.examples)}.yaml")
                    shutil.copy(path, figures.examples[cause])
            elif code == 0:
                figures.accepted += 1
            elif code == 2 and text.startswith("error: ") and text.count("\n") <= 1:
                figures.clean_errors += 1
            else:
                figures.other_exits += 1
                figures.causes[f"exit {code}: {text.strip().splitlines()[-1][:100] if text.strip() else ''}"] += 1
        path.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
        cpu.pop(path, None)
        if figures.files % 250 == 0:  # progress, so that a run cut short still says what it found
            print(f"  after {figures.files} files: {figures.clean_errors} clean errors, {figures.accepted} accepted, "
                  f"{figures.other_exits} other exits, tracebacks {figures.tracebacks}, hangs {figures.hangs}, "
                  f"memory blow-ups {figures.memory_blowups}", flush=True)

    while produced < count or running:
        while produced < count and len(running) < workers:
            text = mutate(rng.choice(seeds), rng)
            path = files_dir / f"m{produced}.yaml"
            path.write_text(text)
            out = files_dir / f"m{produced}.out"
            scratch = workdir / f"scratch{produced % workers}"
            scratch.mkdir(exist_ok=True)
            pid = os.fork()
            if pid == 0:
                _child_plan(path, scratch, out)
            running[pid] = (path, out, time.monotonic())
            watches[pid] = HangWatch(pid)
            produced += 1
        time.sleep(0.005)
        for pid in list(running):
            cpu[running[pid][0]] = _cpu_seconds(pid) or cpu.get(running[pid][0], 0.0)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                reap(pid, status, None)
                continue
            # A hang: past the limit in CPU time (a loop), or asleep without using CPU (a wait
            # that never ends); never by wall time, which stretches with the load (HangWatch).
            watch = watches[pid]
            watch.update()
            if watch.hung(time_limit):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                figures.hang_notes.append(f"hang-{figures.hangs + 1}.yaml: {watch.note()}")
                reap(pid, None, "hang")
            elif _rss_bytes(pid) > memory_limit:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                reap(pid, None, "memory")
    return figures


# ---------------------------------------------------------------- 2. injection corpus

def corpus(canary_dir: Path) -> list[str]:
    """Strings that would run a command if any shell evaluated them; each touches its own canary."""
    payloads = []
    forms = [
        "; touch {c}", "$(touch {c})", "`touch {c}`", "' ; touch {c} ; '", '" ; touch {c} ; "', "\ntouch {c}\n",
        "a\x00b; touch {c}", "|| touch {c}", "&& touch {c}", "| touch {c}", "> {c}", "$(touch${{IFS}}{c})",
        "{{{{ cycler.__init__.__globals__.os.system('touch {c}') }}}}", "{{% raw %}}$(touch {c}){{% endraw %}}",
        "x\"; touch {c}; echo \"", "\\\"; touch {c}; #", "$'\\x3b' touch {c}", "-o {c}", "--output={c}",
        "\r\ntouch {c}", "#!/bin/sh\ntouch {c}", "${{PATH:0:0}}$(touch {c})",
    ]
    for index, form in enumerate(forms):
        payloads.append(form.format(c=canary_dir / f"c{index}"))
    return payloads


SWEEP_STRING_FIELDS: list[tuple] = [
    ("name",), ("description",), ("experiments", 0, "name"), ("experiments", 0, "description"),
    ("experiments", 0, "queue"), ("experiments", 0, "sites", 0), ("experiments", 0, "walltime"),
    ("experiments", 0, "grid", "tag"), ("experiments", 0, "zip", "z", "tag", 0),
    ("experiments", 0, "exclude", 0, "tag"), ("variants", "v", "description"),
]

SITE_STRING_FIELDS: list[tuple] = [
    ("name",), ("description",), ("python",), ("device", "model"), ("queues", 0, "name"), ("queues", 0, "tier"),
    ("launcher", "name"), ("launcher", "args", 0), ("env", "ORCH_FUZZ"), ("env", "BAD NAME"), ("setup", 0),
    ("directives", 0), ("resources", "gres_name"), ("resources", "mem"), ("resources", "constraint"),
    ("resources", "select"), ("resources", "place"), ("resources", "filesystems"), ("account", "env"),
    ("account", "suffix"), ("template",), ("queues", 0, "directives", 0),
]


def _base_sweep(site: str) -> dict:
    return {"name": "inject", "description": "d", "variants": {"v": {"description": "d"}},
            "experiments": [{"name": "e", "description": "d", "workload": "gemm", "sites": [site],
                             "walltime": "00:05:00",
                             "grid": {"devices": 1, "m": 16, "n": 16, "k": 16, "warmup": 1, "iters": 2, "tag": "t"},
                             "exclude": [{"tag": "zz"}]}]}


def _base_site(name: str, scheduler: str, python: str) -> dict:
    site: dict = {"name": name, "description": "injection target", "scheduler": scheduler, "python": python,
                  "max_nodes": 2, "device": {"type": "cpu", "model": "host-cpu", "per_node": 1, "precisions": ["fp32"]},
                  "queues": [{"name": "q", "max_nodes": 2, "max_walltime": "01:00:00"}],
                  "launcher": {"name": {"local": "python", "slurm": "srun", "pbs": "mpiexec"}[scheduler]},
                  "env": {"ORCH_FUZZ": "1"}, "setup": ["true"], "directives": []}
    if scheduler == "slurm":
        site["resources"] = {"gpu_request": "none", "gres_name": "gpu"}
    if scheduler == "pbs":
        site["resources"] = {"select": "ncpus=1", "place": "scatter", "filesystems": "home"}
    return site


STUB_WORKLOAD = """#!{python}
# Stands in for the workload's python: records its argv, writes a valid metrics file.
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--output") + 1] if "--output" in args else "metrics.json"
ledger = os.environ.get("ORCH_FUZZ_LEDGER")
if ledger:
    with open(ledger, "a") as handle:
        handle.write(os.environ.get("ORCH_RUN_ID", "?") + "\\n")
with open(os.path.join(os.environ.get("ORCH_RUN_DIR", "."), "argv.json"), "w") as handle:
    json.dump(args, handle)
json.dump({{"schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 1,
           "device": {{"type": "cpu", "model": "stub", "count": 1}}, "metrics": {{"tflops": 1.0}},
           "timing": {{"warmup_steps": 1, "timed_steps": 1}}}}, open(out, "w"))
"""

STUB_COMMAND = """#!/bin/bash
# Stands in for {name}: a launcher (srun, mpiexec, ...) runs the command from the python on; the rest do nothing.
for ((i=1; i<=$#; i++)); do if [ "${{!i}}" = "{python}" ]; then exec "${{@:i}}"; fi; done
exit 0
"""


@dataclass
class InjectionFigures:
    cases: int = 0
    refused: int = 0
    scripts_run: int = 0
    runs_through_orch: int = 0
    executions: int = 0
    values_changed: int = 0
    details: list = field(default_factory=list)


def _with(data: dict[str, Any], path: tuple, value: str) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at ``path`` (lists and mappings made on the way)."""
    data = json.loads(json.dumps(data))
    if path[:3] == ("experiments", 0, "zip"):  # the tag as a zip group instead of a grid key
        data["experiments"][0]["grid"].pop("tag", None)
        data["experiments"][0]["zip"] = {"z": {"tag": [value]}}
        return data
    target: list[Any] | dict[str, Any] = data  # the document's container the path is at
    for index, part in enumerate(path[:-1]):
        make: list[Any] | dict[str, Any] = [] if isinstance(path[index + 1], int) else {}
        if isinstance(target, list):
            while len(target) <= part:
                target.append(json.loads(json.dumps(make)))
            target = target[part]
        else:
            if not isinstance(target.get(part), (list, dict)):
                target[part] = make
            target = target[part]
    last = path[-1]
    if isinstance(target, list):
        while len(target) <= last:
            target.append(None)
    target[last] = value
    return data


def injection_trials(workdir: Path) -> InjectionFigures:
    from orchestrator.errors import UserError
    from orchestrator.plan.record import plan_sweep
    from orchestrator.plan.sweep import parse_sweep
    from orchestrator.sites.profiles import load_site

    figures = InjectionFigures()
    canaries = workdir / "canaries"
    canaries.mkdir(parents=True)
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "python-stub"
    stub.write_text(STUB_WORKLOAD.format(python=sys.executable))
    stub.chmod(0o755)
    for name in ("srun", "mpiexec", "mpirun", "module", "sbatch", "qsub", "conda", "torchrun"):
        (bin_dir / name).write_text(STUB_COMMAND.format(name=name, python=stub))
        (bin_dir / name).chmod(0o755)
    payloads = corpus(canaries)
    sites_dir = workdir / "sites"
    sites_dir.mkdir()
    run_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    accepted_local_sweeps: list[tuple[dict, str, tuple]] = []

    def run_script(script: str, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        (where / "job.sh").write_text(script)
        subprocess.run(["bash", str(where / "job.sh")], cwd=where, env={**run_env, "ORCH_RUN_DIR": str(where)},
                       capture_output=True, timeout=30)
        figures.scripts_run += 1

    case = 0
    for scheduler in ("local", "slurm", "pbs"):
        for field_path in SITE_STRING_FIELDS + [("sweep",) + f for f in SWEEP_STRING_FIELDS]:
            for payload in payloads:
                case += 1
                figures.cases += 1
                site_name = f"inj{case}"
                site = _base_site(site_name, scheduler, str(stub))
                sweep = _base_sweep(site_name)
                if field_path[0] == "sweep":
                    sweep = _with(sweep, field_path[1:], payload)
                elif field_path[0] == "setup":  # a setup line is a command by design: the payload is its argument
                    site = _with(site, field_path, "module load " + payload)
                else:
                    site = _with(site, field_path, payload)
                (sites_dir / f"{site_name}.yaml").write_text(yaml.safe_dump(site, sort_keys=False, allow_unicode=True))
                sweep_path = workdir / "sweeps" / f"{site_name}.yaml"
                sweep_path.parent.mkdir(exist_ok=True)
                sweep_path.write_text(yaml.safe_dump(sweep, sort_keys=False, allow_unicode=True))
                try:
                    load_site(site_name, [sites_dir])
                    loaded = parse_sweep(sweep_path)
                    plans = plan_sweep(loaded, workdir / "runs", sites_dirs=[sites_dir])
                except UserError:
                    figures.refused += 1
                    continue
                except Exception as exc:  # noqa: BLE001 - a crash is a finding here too
                    figures.details.append(f"crash {type(exc).__name__}: {exc} ({field_path}, {payload!r})")
                    figures.refused += 1
                    continue
                for plan in plans:
                    if plan.script:
                        run_script(plan.script, workdir / "ran" / str(case))
                # Values that reach the workload's command line go through the whole path too, once each.
                if (scheduler == "local" and field_path == ("sweep", "experiments", 0, "grid", "tag")
                        and any(p.script for p in plans)):
                    accepted_local_sweeps.append((sweep, site_name, field_path))

    # The sweep fields that were accepted, through the whole path on the local site: one sweep, one
    # `orch run` (tags and descriptions vary per experiment).
    if accepted_local_sweeps:
        site = _base_site("injlocal", "local", str(stub))
        (sites_dir / "injlocal.yaml").write_text(yaml.safe_dump(site, sort_keys=False))
        experiments, expected = [], {}
        for index, (sweep, _, _field_path) in enumerate(accepted_local_sweeps):
            exp = {**sweep["experiments"][0], "name": f"e{index}", "sites": ["injlocal"]}
            exp.pop("queue", None)
            experiments.append(exp)
            expected[f"e{index}"] = exp["grid"]["tag"]
        whole = {"name": "injrun", "experiments": experiments}
        whole_path = workdir / "injrun.yaml"
        whole_path.write_text(yaml.safe_dump(whole, sort_keys=False, allow_unicode=True))
        home = workdir / "orch-run"
        home.mkdir()
        env = {**run_env, "ORCH_HOME": str(home / ".orch"), "ORCH_LOCAL_CORES": "2"}
        env.pop("ORCH_DB_URL", None)
        proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--sites-dir", str(sites_dir), "run",
                               str(whole_path), "--interval", "0.3", "--json"], cwd=home, env=env,
                              capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            figures.details.append(f"orch run exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        for argv_file in (home / ".orch" / "runs").glob("*/*/argv.json"):
            figures.runs_through_orch += 1
            spec = json.loads((argv_file.parent / "spec.json").read_text())
            argv = json.loads(argv_file.read_text())
            want = expected.get(spec.get("experiment"))
            got = argv[argv.index("--tag") + 1] if "--tag" in argv else None
            if want is not None and got != want:
                figures.values_changed += 1
                figures.details.append(f"value changed: {want!r} -> {got!r}")
    figures.executions = len(list(canaries.iterdir()))
    figures.details += [f"executed: {p.name}" for p in canaries.iterdir()]
    return figures


# ---------------------------------------------------------------- 3. kill -9

@dataclass
class KillFigures:
    scheduler: str
    trials: int = 0
    runs: int = 0
    kills: int = 0
    executed_twice: int = 0
    lost: int = 0
    not_settled: int = 0
    details: list = field(default_factory=list)


KILL_SWEEP = """\
name: kill{trial}
retry: {{max_attempts: 3, failures: [lost, failed, timeout]}}
experiments:
  - name: e
    workload: gemm
    sites: [{site}]
    walltime: "00:05:00"
    grid: {{m: 16, n: 16, k: 16, warmup: 1, iters: 2, tag: [{tags}]}}
"""


def _orch(args: list[str], cwd: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _kill_at_random(args: list[str], cwd: Path, env: dict, rng: random.Random, window: float) -> bool:
    """Start ``orch ARGS`` and SIGKILL it at a random point (the process, as `kill -9 PID` does; the
    local scheduler's job controllers it started are in sessions of their own and live on); True
    if it was still running when the kill came."""
    proc = _orch(args, cwd, env)
    time.sleep(rng.uniform(0.0, window))
    alive = proc.poll() is None
    if alive:
        proc.kill()
    proc.wait()
    return alive


# Trials run this many at a time (on one database: concurrent orch processes are part of the test).
KILL_PARALLEL = 3


def kill_trials_local(trials: int, runs_per_trial: int, rng: random.Random, workdir: Path) -> KillFigures:
    """kill -9 of `orch submit` and `orch status --watch` at random points on the local scheduler.

    Every run's stand-in program appends the run id to a ledger, so "executed twice" and "lost"
    are counted from what ran, not from orch's database. The submit grace is shortened
    (``ORCH_SUBMIT_GRACE_S=4``, as the tests do) so that an intent a kill left behind is handed
    back in seconds rather than minutes."""
    import sqlite3

    from orchestrator.plan.record import plan_sweep, record_plan
    from orchestrator.plan.sweep import parse_sweep
    from orchestrator.results.db.engine import open_database

    figures = KillFigures("local")
    bin_dir = workdir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    stub = bin_dir / "python-stub"
    stub.write_text(STUB_WORKLOAD.format(python=sys.executable))
    stub.chmod(0o755)
    sites_dir = workdir / "sites"
    sites_dir.mkdir(exist_ok=True)
    (sites_dir / "killlocal.yaml").write_text(yaml.safe_dump(_base_site("killlocal", "local", str(stub)),
                                                             sort_keys=False))
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    ledger = workdir / "ledger"
    db_path = home / ".orch" / "orch.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update({"ORCH_HOME": str(home / ".orch"), "ORCH_FUZZ_LEDGER": str(ledger), "ORCH_LOCAL_CORES": "2",
                "ORCH_SUBMIT_GRACE_S": "4", "ORCH_SITES_PATH": str(sites_dir)})
    # Planning is not what is tried here: every trial's sweep is recorded up front, in this process.
    sessions = open_database(f"sqlite:///{db_path}")
    for trial in range(trials):
        tags = ", ".join(f"t{trial}-{i}" for i in range(runs_per_trial))
        sweep = workdir / f"kill{trial}.yaml"
        sweep.write_text(KILL_SWEEP.format(trial=trial, site="killlocal", tags=tags))
        loaded = parse_sweep(sweep)
        record_plan(sessions, loaded, plan_sweep(loaded, home / ".orch" / "runs", sites_dirs=[sites_dir]))
    sessions.kw["bind"].dispose()
    from concurrent.futures import ThreadPoolExecutor
    from threading import Lock

    lock = Lock()
    seeds = [rng.randrange(2**31) for _ in range(trials)]

    def trial_run(trial: int) -> None:
        trial_rng = random.Random(seeds[trial])
        name = f"kill{trial}"
        kills = 0
        for command in (["submit", "--sweep", name], ["status", "--watch", "--interval", "0.2", "--sweep", name]):
            for _ in range(trial_rng.choice([1, 1, 2])):
                kills += _kill_at_random(command, home, env, trial_rng, 4.0)
        # Then orch is left to finish: submit what is planned, follow to the end (intents a kill left
        # behind are handed back after the grace and submitted again).
        settled = False
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit", "--sweep", name], cwd=home, env=env,
                           capture_output=True)
            subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", "--watch", "--interval", "0.3",
                            "--sweep", name], cwd=home, env=env, capture_output=True, timeout=1800)
            with sqlite3.connect(db_path, timeout=600) as db:
                waiting = db.execute("SELECT count(*) FROM runs WHERE sweep = ? AND status IN "
                                     "('planned', 'retry', 'submitting', 'submitted', 'running')",
                                     (name,)).fetchone()[0]
            if not waiting:
                settled = True
                break
        with sqlite3.connect(db_path, timeout=600) as db:
            rows = db.execute("SELECT r.id, r.status, group_concat(a.failure_class || ': ' || "
                              "coalesce(a.reason, ''), ' | ') FROM runs r LEFT JOIN attempts a ON a.run_id = r.id "
                              "WHERE r.sweep = ? GROUP BY r.id, r.status", (name,)).fetchall()
        with lock:
            executions = Counter(ledger.read_text().split()) if ledger.exists() else Counter()
            figures.trials += 1
            figures.kills += kills
            figures.not_settled += not settled
            figures.runs += len(rows)
            for run_id, status, failures in rows:
                count = executions.get(run_id, 0)
                if count > 1:
                    figures.executed_twice += 1
                    figures.details.append(f"{name}: run {run_id} executed {count} times")
                if status != "finished" or count == 0:
                    figures.lost += 1
                    figures.details.append(f"{name}: run {run_id} ended {status}, executed {count} times "
                                           f"({(failures or '')[:300]})")

    with ThreadPoolExecutor(max_workers=KILL_PARALLEL) as pool:
        list(pool.map(trial_run, range(trials)))
    return figures


def kill_trials_pbs(trials: int, runs_per_trial: int, rng: random.Random, workdir: Path) -> KillFigures:
    """The PBS emulator's trials (benchmarks/fault_trials_pbs.py, qstat dropping operands)."""
    from benchmarks.fault_trials_pbs import run_trials

    found = run_trials(trials, rng.randrange(2**31), runs_per_trial, True, workdir)
    figures = KillFigures(found.scheduler, found.trials, found.runs, found.submit_kills + found.status_kills,
                          found.executed_twice, found.lost, 0, list(found.details))
    if found.duplicate_jobs:
        figures.details.append(f"{found.duplicate_jobs} job(s) beyond one per run on the server")
    return figures


def kill_trials_slurm(trials: int, runs_per_trial: int, rng: random.Random, workdir: Path) -> KillFigures:
    """The sandbox Slurm cluster's trials (benchmarks/fault_trials_slurm.py; the cluster must be up)."""
    from benchmarks.fault_trials_slurm import run_trials

    found = run_trials(trials, rng.randrange(2**31), runs_per_trial, workdir)
    figures = KillFigures(found.scheduler, found.trials, found.runs, found.submit_kills + found.status_kills,
                          found.executed_twice, found.lost, 0, list(found.details))
    if found.duplicate_jobs:
        figures.details.append(f"{found.duplicate_jobs} job(s) beyond one per run in Slurm's accounting")
    return figures


# A scheduler's kill trials: (trials, runs per trial, rng, working directory) -> figures.
KILL_TRIALS: dict[str, Callable[[int, int, random.Random, Path], KillFigures]] = {
    "local": kill_trials_local,
    "slurm": kill_trials_slurm,
    "pbs": kill_trials_pbs,
}


def stop_leftovers(workdir: Path) -> int:
    """SIGKILL processes this benchmark started that are still alive (job controllers of an
    interrupted run): those whose command line names its working directory."""
    stopped = 0
    marker = str(workdir).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
                stopped += 1
        except (OSError, ProcessLookupError):
            continue
    return stopped


# ---------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutations", type=int, default=5000)
    parser.add_argument("--kills", type=int, default=50, help="kill trials per scheduler")
    parser.add_argument("--runs-per-trial", type=int, default=4)
    parser.add_argument("--schedulers", default="local", help=f"of {', '.join(KILL_TRIALS)}")
    parser.add_argument("--time-limit", type=float, default=20.0, help="CPU seconds per mutated file")
    parser.add_argument("--memory-limit-mb", type=int, default=1024, help="resident memory per mutated file")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--parts", default="mutations,injection,kills,classes")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    workdir = Path(tempfile.mkdtemp(prefix="orch-faults-"))
    print(f"orch fault injection, seed {args.seed}, working in {workdir}", flush=True)
    lines: list[str] = []
    try:
        if "mutations" in parts:
            started = time.monotonic()
            m = mutation_trials(args.mutations, args.seed, args.time_limit, args.memory_limit_mb * 2**20,
                                args.workers, workdir / "mutations")
            lines.append(f"mutated sweeps: {m.files} files through `orch plan FILE --dry-run` "
                         f"({args.time_limit:.0f} CPU s or {BLOCKED_LIMIT_S:.0f} s blocked, "
                         f"{args.memory_limit_mb} MB each) in {time.monotonic() - started:.0f} s: "
                         f"{m.clean_errors} clean one-line errors, {m.accepted} accepted, {m.other_exits} other exits; "
                         f"tracebacks {m.tracebacks}, hangs {m.hangs}, memory blow-ups {m.memory_blowups}; "
                         f"slowest {m.slowest_s:.1f} CPU s")
            for cause, count in m.causes.most_common():
                lines.append(f"  cause x{count}: {cause}  (e.g. {m.examples.get(cause, '')})")
            for note in m.hang_notes:
                lines.append(f"  {note} (kept in {workdir / 'mutations'} with --keep)")
            for slow in m.slow_seeds:
                lines.append(f"  seed left out (planning it unmutated is past the limits): {slow}")
            print("\n".join(lines), flush=True)
        if "injection" in parts:
            started = time.monotonic()
            i = injection_trials(workdir / "injection")
            lines.append(f"injection corpus: {i.cases} (field, payload, scheduler) cases, {i.refused} refused, "
                         f"{i.scripts_run} rendered scripts run with bash, {i.runs_through_orch} runs through "
                         f"`orch run` on local in {time.monotonic() - started:.0f} s: executions {i.executions}, "
                         f"values changed {i.values_changed}")
            lines += [f"  {d}" for d in i.details[:20]]
            print(lines[-1 - min(len(i.details), 20)], flush=True)
        if "kills" in parts:
            rng = random.Random(args.seed)
            for name in args.schedulers.split(","):
                started = time.monotonic()
                k = KILL_TRIALS[name](args.kills, args.runs_per_trial, rng, workdir / f"kill-{name}")
                lines.append(f"kill -9 on {name}: {k.trials} trials, {k.runs} runs, {k.kills} kills of `orch submit` "
                             f"and `orch status --watch` in {time.monotonic() - started:.0f} s: executed twice "
                             f"{k.executed_twice}, lost {k.lost}, not settled {k.not_settled}")
                lines += [f"  {d}" for d in k.details[:20]]
                print(lines[-1 - min(len(k.details), 20)], flush=True)
        if "classes" in parts:
            from benchmarks.fault_classes import class_trials

            for name in args.schedulers.split(","):
                c = class_trials(name, workdir / f"classes-{name}")
                lines.append(f"failure classes on {name} ({c.restart} during the follow): {c.attempts} attempts "
                             f"in {c.seconds:.0f} s: misclassified {c.misclassified}, false failures "
                             f"{c.false_failures}")
                lines += [f"  {d}" for d in c.details[:20]]
                print(lines[-1 - min(len(c.details), 20)], flush=True)
    finally:
        print("\n" + "\n".join(lines))
        stop_leftovers(workdir)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
