"""The carried install of the device check (issue 26): ``scripts/carry_wheels.py`` makes the
wheels where PyPI is reachable; a machine without network installs orch from them with
``pip install --no-index`` and runs it.

Making the wheels needs PyPI (as the script does wherever it runs); installing them needs nothing:
a fresh virtual environment, no index, and ``orch`` answers. The GPU machine's folder (Python 3.12,
what its image lacks) is checked for completeness against the image's package list the script
declares, and for the 64 MiB that travel with the tree.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "carry_wheels.py"
sys.path.insert(0, str(SCRIPT.parent))
import carry_wheels  # noqa: E402  (a script, not a package: imported from its folder)

GPU_MACHINE = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
               "platform_python_implementation": "CPython", "os_name": "posix"}


def make(dest: Path, *args: str) -> Path:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dest", str(dest), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dest


def metadata(wheel: Path) -> tuple[str, list[Requirement]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode())
    return canonicalize_name(message["Name"]), [Requirement(r) for r in message.get_all("Requires-Dist") or []]


def unmet(wheels: list[Path], provided: set[str], roots: list[str]) -> set[str]:
    """What installing ``roots`` from ``wheels`` on the GPU machine would still look for."""
    dists = dict(metadata(w) for w in wheels)
    missing: set[str] = set()
    todo = [(canonicalize_name(r), "") for r in roots]
    seen: set[tuple[str, str]] = set()
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        if name not in dists:
            if name not in provided:
                missing.add(name)
            continue
        for req in dists[name]:
            if req.marker is None or req.marker.evaluate({**GPU_MACHINE, "extra": extra}):
                todo.append((canonicalize_name(req.name), ""))
                todo += [(canonicalize_name(req.name), e) for e in req.extras]
    return missing


@pytest.mark.slow
def test_the_gpu_machines_folder_is_complete_and_travels(tmp_path: Path) -> None:
    wheels = sorted(make(tmp_path / "gpu").glob("*.whl"))
    names = {metadata(w)[0] for w in wheels}
    assert {"orch", "deepspeed", "sqlalchemy", "alembic", "pydantic", "pydantic-core", "submitit"} <= names
    assert sum(w.stat().st_size for w in wheels) < carry_wheels.LIMIT_BYTES
    assert not any(n in names for n in ("torch", "numpy", "matplotlib")), "the machine has them: never carried"
    # Every binary wheel is for the GPU machine's Python 3.12 on x86-64 Linux.
    assert all(w.name.endswith("-py3-none-any.whl") or ("-cp312-" in w.name and "x86_64" in w.name) for w in wheels)
    provided: set[str] = {canonicalize_name(n) for n in carry_wheels.PROVIDED}
    assert unmet(wheels, provided, ["orch", "deepspeed"]) == set()


@pytest.mark.slow
def test_orch_installs_from_the_folder_with_no_index_and_runs(tmp_path: Path) -> None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheels = make(tmp_path / "wheels", "--full", "--python-version", version)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
                              str(wheels), "orch"], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # From a folder outside the checkout, so nothing is imported from it.
    orch = venv / "bin" / "orch"
    help_ = subprocess.run([str(orch), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0 and "plan" in help_.stdout, help_.stderr
    show = subprocess.run([str(orch), "sites", "show", "gpu-box:h200"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert show.returncode == 0 and "H200" in show.stdout, show.stderr
    where = subprocess.run([str(python), "-c", "import orchestrator; print(orchestrator.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert str(venv) in where.stdout, where.stdout + where.stderr
