"""Build orch's pre-traced memory predictions (orchestrator/predict/pretraced.json).

    .venv/bin/python scripts/pretrace.py            # add the shapes the table lacks (a new example, an option)
    .venv/bin/python scripts/pretrace.py --full     # trace every shape afresh and rewrite the table
    .venv/bin/python scripts/pretrace.py --check    # exit 1 when the table is of another torch or version

Plans every example (examples/*.yaml, each variant too), every study file with each experiment
moved onto every built-in site and system (what a user adapting an example to their site plans), and
the device check's sweeps (benchmarks/device_check.py: its GPU sweep on gpu-box's systems, so a lent
GPU's minutes are not spent tracing, and its --tiny one), with every site's account and environment
set to a placeholder (orchestrator/sites/placeholders.py), so that no run is refused before its
memory is predicted, and runs ``orch predict`` for each preset below; all on an empty prediction
cache. The cache then holds each prediction and each leaf it was put together from that the table
did not hold (``--full``: the table switched off, so every shape is traced afresh); the table is
those entries added to (``--full``: in place of) the ones it had.

The entries are keyed by the traced shape, not by the code (orchestrator/predict/pretraced.py says
why and what it costs): an edit that does not change what is traced leaves the table valid. Run
``--full`` after a change that alters the traced bytes (tests/unit/test_pretraced.py's fresh traces
fail) and bump ``memory.CACHE_VERSION`` with it, or after a change of torch's version. A full
rebuild takes a few minutes on 2 cores; adding an example's shapes, its own traces.
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

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.device_check import GPU, TINY, sweep_document  # noqa: E402
from orchestrator.predict import memory, pretraced  # noqa: E402
from orchestrator.sites.placeholders import placeholder_env  # noqa: E402
from orchestrator.sites.profiles import load_site  # noqa: E402

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
STUDY_FILES = sorted((REPO / "examples").glob("[ABC][0-9]-*.yaml"))
# The built-in sites each study file is also planned on, every system of each included
# (tests/vendors/test_rendered_commands.py checks every script those plans render).
EVERY_SITE = ["alcf-ai-testbed", "baskerville", "cosma8", "dawn", "jade2", "local", "polaris", "stanage"]
# `orch predict` as the README and study E start it: each gpt2 preset a campaign begins with, on one
# node of the sites the studies ran (every layout it ranks is a run the plan would predict).
PREDICTS: list[tuple[str, int, str, list[str]]] = [
    ("gpt2", 4, "polaris", []), ("gpt2-xl", 4, "polaris", []), ("gpt2-xl", 8, "perlmutter", []),
    ("mpt-7b", 8, "dgx:h100", []), ("mpt-7b", 8, "dgx:a100_80", []),
    # issue 25's MPT-7B layout: micro-batch 8 of 2048 tokens in bf16 on a Polaris node
    ("mpt-7b", 8, "polaris", ["--batch-size", "8", "--seq-len", "2048", "--precision", "bf16"]),
]


def every_site_targets() -> list[str]:
    """EVERY_SITE and each of its systems (``site:system``)."""
    out: list[str] = []
    for name in EVERY_SITE:
        out += [name, *(f"{name}:{system}" for system in load_site(name).systems)]
    return out


def on_every_site(study: Path) -> dict:
    """``study``'s sweep with each experiment's sites replaced by every_site_targets(), no variants."""
    data = yaml.safe_load(study.read_text())
    for experiment in data["experiments"]:
        experiment["sites"] = every_site_targets()
    data.pop("variants", None)
    return data


def plans(workdir: Path) -> list[tuple[Path, str | None]]:
    """Every example and each of its variants (``orch plan --variant``), then every study file on
    every site and the device check's sweeps (written under ``workdir``)."""
    out: list[tuple[Path, str | None]] = []
    for path in EXAMPLES:
        out.append((path, None))
        out.extend((path, name) for name in (yaml.safe_load(path.read_text()) or {}).get("variants") or {})
    for study in STUDY_FILES:
        moved = workdir / f"{study.stem}-every-site.yaml"
        moved.write_text(yaml.safe_dump(on_every_site(study), sort_keys=False))
        out.append((moved, None))
    for name, sizes, site in (("h100", GPU, "gpu-box:h100"), ("h200", GPU, "gpu-box:h200"), ("tiny", TINY, TINY.site)):
        check = workdir / f"device-check-{name}.yaml"
        check.write_text(yaml.safe_dump(sweep_document(sizes, site), sort_keys=False))
        out.append((check, None))
    return out


def _orch(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"orch {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")


def build(out: Path, full: bool) -> int:
    """Trace every example's and preset's shapes the table lacks (``full``: every one, afresh); write
    the table to ``out``; the count of shapes traced."""
    kept: dict[str, int] = {}
    table = pretraced.read()
    if not full and (table.get("torch"), table.get("version")) == memory.table_stamp():
        kept = dict(table["entries"])
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
        env.update(placeholder_env())
        env.update(ORCH_HOME=str(Path(tmp) / "home"), ORCH_MEMORY_CACHE=str(cache))
        if not kept:
            env[pretraced.ENV] = "0"
        began = time.perf_counter()
        for sweep, variant in plans(Path(tmp)):
            _orch(["plan", "--dry-run", "--json", str(sweep)] + (["--variant", variant] if variant else []), env)
            print(f"{sweep.name}{f' --variant {variant}' if variant else ''}: "
                  f"{len(list(cache.glob('*.json')))} entries so far ({time.perf_counter() - began:.0f} s)", flush=True)
        for model, devices, site, extra in PREDICTS:
            _orch(["predict", "--model", model, "--devices", str(devices), "--site", site, *extra, "--json"], env)
            print(f"predict {model} on {devices} of {site}: {len(list(cache.glob('*.json')))} entries so far "
                  f"({time.perf_counter() - began:.0f} s)", flush=True)
        traced = {}
        for path in cache.glob("*.json"):
            stored = json.loads(path.read_text())
            traced[stored["inputs"]] = int(stored["bytes"])
    pretraced.write({**kept, **traced}, memory.table_stamp(), out)
    return len(traced)


def stale() -> str | None:
    """Why the shipped table cannot serve this install (another torch or cache version), or None."""
    table = pretraced.read()
    stamp = (table.get("torch"), table.get("version"))
    if stamp != memory.table_stamp():
        return (f"{pretraced.TABLE.relative_to(REPO)} was traced with torch {stamp[0]}, version {stamp[1]}; "
                f"this install has torch {memory.table_stamp()[0]}, version {memory.CACHE_VERSION}: "
                "run .venv/bin/python scripts/pretrace.py --full")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the table is stale; build nothing")
    parser.add_argument("--full", action="store_true", help="trace every shape afresh (default: only the missing)")
    parser.add_argument("--out", type=Path, default=pretraced.TABLE, help="where to write (default: the shipped table)")
    args = parser.parse_args(argv)
    if args.check:
        why = stale()
        print(why or f"{pretraced.TABLE.relative_to(REPO)} matches this install's torch and cache version")
        return 1 if why else 0
    began = time.perf_counter()
    count = build(args.out, args.full)
    print(f"traced {count} shapes; wrote {args.out} ({args.out.stat().st_size // 1024} KiB) "
          f"in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
