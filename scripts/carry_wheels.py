"""Wheels for a machine without network (issue 26): orch itself and what that machine lacks.

    .venv/bin/python scripts/carry_wheels.py                      # -> .carry/wheels/, for the GPU machine
    .venv/bin/python scripts/carry_wheels.py --full --python-version 3.11 --dest DIR   # a bare Python

Run it where PyPI is reachable. The folder (ignored by git) travels with the tree; there
``scripts/device_check.sh`` installs from it with ``pip install --no-index --find-links``.

Default (the one-GPU machine): Python 3.12 on x86-64 Linux, whose image already holds PyTorch,
Triton, numpy, matplotlib, jinja2, typer, rich, PyYAML, pyarrow and the rest of PROVIDED (its
package list as a session read it, 2026-11-17); carried are orch's wheel, DeepSpeed's (PyPI has only
its source: built here with no compiled ops, DS_BUILD_OPS=0, since the workloads' ZeRO runs use
torch's AdamW and load none) and MISSING, at the versions orch's tests run with here. Under
64 MiB in all (the limit of what travels with the tree), checked at the end.

``--full``: everything orch needs at run time but torch, resolved by pip for the target Python,
for a machine with nothing installed (the test installs that into a fresh virtual environment).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEEPSPEED = "deepspeed==0.19.8"  # scripts/setup.sh's version
LIMIT_BYTES = 64 * 2**20
# What orch and DeepSpeed need that the GPU image lacks. typing-extensions is there, but pydantic
# needs a recent one: carried so pip can upgrade it rather than fail offline.
MISSING = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions", "SQLAlchemy",
           "alembic", "Mako", "submitit", "psycopg", "psycopg-binary", "hjson", "ruptures")
# The GPU image's own packages that orch or DeepSpeed require (.library device notes, KINDS.md).
PROVIDED = ("torch", "numpy", "matplotlib", "Jinja2", "MarkupSafe", "typer", "click", "rich", "PyYAML", "pyarrow",
            "cloudpickle", "einops", "msgpack", "ninja", "packaging", "psutil", "py-cpuinfo", "tqdm",
            "greenlet", "shellingham", "markdown-it-py", "pygments", "typing-inspect", "nvidia-ml-py", "scipy")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_24_x86_64")


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"carry_wheels: {' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")


def pinned(name: str) -> str:
    """``name==version`` as installed here (the versions the tests run with), else just the name."""
    try:
        return f"{name}=={importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


def target_flags(python_version: str) -> list[str]:
    flags = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        flags += ["--platform", platform]
    return flags


def build(dest: Path, python_version: str, full: bool) -> list[Path]:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    pip("wheel", "--quiet", "--no-deps", "-w", str(dest), str(REPO))  # orch (templates, sites, db inside)
    # DeepSpeed's source built into a pure-Python wheel with no ops compiled (any machine, any CUDA).
    pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dest), DEEPSPEED,
        env={"DS_BUILD_OPS": "0", "DS_BUILD_SHM_COMM": "0"})
    if full:
        # orch's whole dependency tree for the target Python, resolved by pip (torch left out).
        orch_wheel = next(dest.glob("orch-*.whl"))
        pip("download", "--quiet", *target_flags(python_version), "-d", str(dest), str(orch_wheel))
    else:
        pip("download", "--quiet", "--no-deps", *target_flags(python_version), "-d", str(dest),
            *[pinned(name) for name in MISSING])
    wheels = sorted(dest.glob("*.whl"))
    total = sum(p.stat().st_size for p in wheels)
    if not full and total > LIMIT_BYTES:
        raise SystemExit(f"carry_wheels: {total / 2**20:.1f} MiB in {dest}, over the 64 MiB that travels")
    print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB in {dest}")
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=REPO / ".carry" / "wheels")
    parser.add_argument("--python-version", default="3.12", help="the target machine's Python (default 3.12)")
    parser.add_argument("--full", action="store_true", help="all of orch's run-time dependencies but torch")
    args = parser.parse_args(argv)
    build(args.dest.resolve(), args.python_version, args.full)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
