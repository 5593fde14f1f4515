"""Plan every example with two revisions of orch and compare what they print.

For a change that must not change behaviour (the move into stage packages of 2026-11-26, say),
this plans each file of examples/, and each of its variants, with `orch plan --dry-run --json
--show` from both revisions and compares the outputs byte for byte: the runs, their ids, the
predictions, the skip reasons and every rendered script. Each revision traces memory into an
empty cache of its own, so both pay (and print) the same cold traces; the trace progress lines
of stderr are left out of the comparison (their timings differ). ``--rename OLD=NEW`` names a
text change that is intended (a module that moved is named in the vendor scripts), applied to
the old revision's output before comparing.

usage: .venv/bin/python benchmarks/compare_plans.py [--base REV] [--new REV] [--rename OLD=NEW ...]
       (defaults: the commit before the layout move, the working tree, and the vendor helpers'
       module path orchestrator.vendors. -> orchestrator.sites.vendors.)
Exit status 1 when any output differs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ENV = {"ORCH_ACCOUNT": "acct123", "COLUMNS": "200"}
NOISE = ("traced ", "tracing the peak memory")  # stderr lines whose text holds timings


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def before_layout_move() -> str:
    found = git("log", "--format=%H", "--grep", "^Layout: move every module", "--regexp-ignore-case").splitlines()
    if not found:
        raise SystemExit("no layout-move commit in this history: name --base")
    return git("rev-parse", f"{found[-1]}^")


def unpack(rev: str, where: Path) -> Path:
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def plans(tree: Path, work: Path, memory: Path) -> dict[str, tuple[str, str]]:
    """{example[.variant]: (stdout, stderr without the trace progress lines)} planned from ``tree``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ENV, ORCH_HOME=str(work / "home"), ORCH_MEMORY_CACHE=str(memory), PYTHONPATH=str(tree))
    out: dict[str, tuple[str, str]] = {}
    for example in sorted((tree / "examples").glob("*.yaml")):
        variants = (yaml.safe_load(example.read_text()) or {}).get("variants") or {}
        for variant in [None, *variants]:
            name = example.stem + (f".{variant}" if variant else "")
            args = ["plan", "--dry-run", "--json", "--show", str(example)] + (["--variant", variant] if variant else [])
            proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=work, env=env,
                                  capture_output=True, text=True)
            stderr = "".join(line for line in proc.stderr.splitlines(keepends=True)
                             if not any(n in line for n in NOISE))
            # Both name this interpreter (local runs) and their own checkout (PYTHONPATH, and the
            # warnings of stderr: a checkout under /tmp is node-local storage): the same text.
            text, stderr = (t.replace(sys.executable, "<python>").replace(str(tree), "<tree>")
                            for t in (proc.stdout, stderr))
            out[name] = (text, f"exit {proc.returncode}\n{stderr}")
            print(f"  {tree.name}: {name} (exit {proc.returncode})", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the old revision (default: the commit before the layout move)")
    parser.add_argument("--new", help="the new revision (default: this working tree)")
    parser.add_argument("--rename", action="append", default=None, metavar="OLD=NEW",
                        help="an intended text change in the outputs (default: the vendor helpers' module path)")
    args = parser.parse_args()
    renames = [tuple(r.split("=", 1)) for r in (args.rename or ["orchestrator.vendors.=orchestrator.sites.vendors."])]
    base = args.base or before_layout_move()
    with tempfile.TemporaryDirectory(prefix="orch-compare-") as tmp:
        old_tree = unpack(base, Path(tmp) / "old")
        new_tree = unpack(args.new, Path(tmp) / "new") if args.new else REPO
        work = Path(tmp) / "work"  # the same path for both: run folders are named in the scripts
        work.mkdir()
        old = plans(old_tree, work, Path(tmp) / "old-memory")
        shutil.rmtree(work)
        work.mkdir()
        new = plans(new_tree, work, Path(tmp) / "new-memory")
    differ = []
    for name in sorted(old.keys() | new.keys()):
        before = old.get(name, ("(missing)", ""))
        for a, b in renames:
            before = (before[0].replace(a, b), before[1].replace(a, b))
        after = new.get(name, ("(missing)", ""))
        if before != after:
            differ.append(name)
            which = "stdout" if before[0] != after[0] else "stderr"
            first = next(((a, b) for a, b in zip((before[0] if which == "stdout" else before[1]).splitlines() + [""],
                                                (after[0] if which == "stdout" else after[1]).splitlines() + [""])
                         if a != b), ("(the same lines)", "(the same lines)"))
            print(f"DIFFERENT: {name} ({which}; first differing line, old then new:)\n  {first[0][:300]}\n"
                  f"  {first[1][:300]}")
    print(f"{len(old)} plans of {base[:10]} against {len(new)} of {args.new or 'the working tree'}: "
          f"{len(differ)} differ (stdout: runs, ids, predictions, reasons, scripts; and stderr)")
    raise SystemExit(1 if differ else 0)


if __name__ == "__main__":
    main()
