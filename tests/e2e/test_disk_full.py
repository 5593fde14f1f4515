"""A full disk (issue 30): `orch plan` says so in one line and leaves nothing half-written: no
run folder the database does not know, no truncated script, no re-planned file out of step with
its row. The disk is a real one: a small tmpfs mounted for the test (the suite runs as root)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import run_orch, write

SWEEP = """\
name: full
experiments:
  - name: e
    workload: gemm
    sites: [local]
    walltime: {walltime}
    grid: {{devices: [1], m: [{sizes}]}}
"""
SIZES = ", ".join(str(16 * i) for i in range(1, 41))  # 40 runs, two files each


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the disk-full tests (they need root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_kib: int) -> Path:
    """Fill the disk but ``leave_kib``: the filler file, removed to free the space."""
    filler = disk / "filler"
    free = subprocess.run(["df", "--output=avail", "-k", str(disk)], capture_output=True, text=True,
                          check=True).stdout.split()[-1]
    with open(filler, "ab") as handle:
        handle.write(b"\0" * max(0, (int(free) - leave_kib) * 1024))
    return filler


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def plan(workdir: Path, sweep: Path, home: Path, db: Path) -> subprocess.CompletedProcess[str]:
    return run_orch("plan", str(sweep), "--json", cwd=workdir,
                    env={"ORCH_HOME": str(home), "ORCH_DB_URL": f"sqlite:///{db}"})


def runs_in(workdir: Path, db: Path) -> int:
    proc = run_orch("sql", "--format", "json", "SELECT count(*) AS n FROM runs", cwd=workdir,
                    env={"ORCH_DB_URL": f"sqlite:///{db}"}, check=True)
    return int(json.loads(proc.stdout)[0]["n"])


def test_a_full_disk_during_a_plan_records_nothing_and_leaves_no_folder(workdir: Path, small_disk: Path) -> None:
    home, db = small_disk / "home", workdir / "orch.db"
    sweep = write(workdir / "full.yaml", SWEEP.format(walltime=10, sizes=SIZES))
    filler = fill(small_disk, leave_kib=48)  # room for a few of the 80 files
    proc = plan(workdir, sweep, home, db)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: cannot write the run folders: ") and "No space left on device" in line, line
    assert "nothing was recorded" in line
    assert runs_in(workdir, db) == 0
    assert not (home / "runs").exists() or files_under(home / "runs") == {}, "half-written run folders were left"
    filler.unlink()
    proc = plan(workdir, sweep, home, db)
    assert proc.returncode == 0, proc.stderr
    assert runs_in(workdir, db) == 40
    scripts = list((home / "runs").rglob("job.sh"))
    assert len(scripts) == 40 and all(s.read_text().endswith("\n") for s in scripts)
    assert not list(home.rglob("*.tmp"))


def test_a_full_disk_during_a_replan_keeps_the_old_files_and_rows(workdir: Path, small_disk: Path) -> None:
    home, db = small_disk / "home", workdir / "orch.db"
    sweep = write(workdir / "full.yaml", SWEEP.format(walltime=10, sizes=SIZES))
    assert plan(workdir, sweep, home, db).returncode == 0
    before = files_under(home / "runs")
    fill(small_disk, leave_kib=8)
    sweep.write_text(SWEEP.format(walltime=20, sizes=SIZES))  # every script changes
    proc = plan(workdir, sweep, home, db)
    assert proc.returncode == 2 and "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
    assert files_under(home / "runs") == before  # not one file replaced, no temporary file left
    walltimes = run_orch("sql", "--format", "json", "SELECT DISTINCT walltime_s FROM runs", cwd=workdir,
                         env={"ORCH_DB_URL": f"sqlite:///{db}"}, check=True).stdout
    assert json.loads(walltimes) == [{"walltime_s": 600}]


def test_a_database_on_the_full_disk_is_a_one_line_error(workdir: Path, small_disk: Path) -> None:
    home = small_disk / "home"
    sweep = write(workdir / "full.yaml", SWEEP.format(walltime=10, sizes=SIZES))
    assert run_orch("sql", "SELECT 1", cwd=workdir, env={"ORCH_HOME": str(home)}).returncode == 0  # db made
    fill(small_disk, leave_kib=0)
    proc = run_orch("plan", str(sweep), cwd=workdir, env={"ORCH_HOME": str(home)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and ("full" in line or "No space left" in line), line
