"""`orch sites rehearsal` for a PBS site: no twin, so the profile runs through the PBS emulator, named
by absolute path (a PBS install's qsub first on PATH is not used), and the command says what that proves
and what it does not."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import run_orch, write

SWEEP = """\
name: polaris-rehearsal
experiments:
  - name: gemm
    workload: gemm
    sites: [polaris]
    walltime: "00:10:00"
    grid: {devices: 1, precision: fp32, m: 64, n: 64, k: 64, warmup: 1, iters: 2}
"""


def _fake_pbs_install(tmp_path: Path) -> tuple[Path, Path]:
    """A machine with PBS installed: its qsub/qstat/qdel first on PATH (a login shell's profile script
    puts them there); each records that it was called and fails. Returns (its bin, its call log)."""
    fake = tmp_path / "site-pbs" / "bin"
    fake.mkdir(parents=True)
    log = tmp_path / "site-pbs" / "calls"
    for name in ("qsub", "qstat", "qdel"):
        (fake / name).write_text(f"#!/bin/sh\necho {name} \"$@\" >>{log}\n"
                                 "echo 'Connection refused' >&2\nexit 1\n")
        (fake / name).chmod(0o755)
    return fake, log


def test_polaris_rehearsal_runs_through_the_emulator(tmp_path: Path) -> None:
    """Even with a PBS install's qsub first on PATH (while the rehearsal is written and while the sweep
    runs), the job reaches the emulator: the profile names its commands by absolute path."""
    out = tmp_path / "rehearsal"
    fake, fake_log = _fake_pbs_install(tmp_path)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    made = run_orch("sites", "rehearsal", "polaris", "-o", str(out), "--json", cwd=tmp_path, env=env, check=True)
    notes = json.loads(made.stdout)["notes"]
    assert any(n.startswith("the rehearsal runs through orch's PBS emulator") and str(fake) in n for n in notes)
    assert any(n.startswith("does not prove:") and "any queue" in n for n in notes)
    text = (out / "polaris.yaml").read_text()
    assert "scheduler: pbs" in text and "system=polaris" in text and "home:eagle" in text
    assert f"commands_dir: {out.resolve() / 'pbs-bin'}" in text
    env_sh = (out / "pbs-env.sh").read_text()
    assert f"PBS_EMU_HOME={out.resolve() / 'pbs-server'}" in env_sh
    # A login shell on that machine: `source pbs-env.sh`, then PBS's profile script puts its qsub first again.
    run_env = {"PATH": f"{fake}{os.pathsep}{out.resolve() / 'pbs-bin'}{os.pathsep}{os.environ['PATH']}",
               "PBS_EMU_HOME": str(out / "pbs-server"), "ORCH_POLARIS_PROJECT": "myproj",
               "PBS_EMU_LOG": str(tmp_path / "emu-calls.log")}
    sweep = write(tmp_path / "sweep.yaml", SWEEP)
    proc = run_orch("--sites-dir", str(out), "run", str(sweep), "--interval", "0.5", cwd=tmp_path, env=run_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT r.status, r.script, a.job_id FROM runs r JOIN attempts a "
                               "ON a.run_id = r.id", cwd=tmp_path, env=run_env, check=True).stdout)
    assert len(rows) == 1 and rows[0]["status"] == "finished" and rows[0]["job_id"].endswith(".pbs01")
    script = rows[0]["script"]
    assert "#PBS -l select=1:system=polaris\n" in script and "#PBS -A myproj\n" in script
    assert "#PBS -l filesystems=home:eagle\n" in script and "#PBS -q debug\n" in script
    assert not fake_log.exists(), fake_log.read_text()  # the site's PBS was never asked
    emulated = [json.loads(line)[0] for line in (tmp_path / "emu-calls.log").read_text().splitlines()]
    assert "qsub" in emulated and "qstat" in emulated  # the emulator received the job and was followed


def test_the_probe_passes_on_polaris_through_the_emulator(tmp_path: Path) -> None:
    """`orch sites probe polaris` with the rehearsal profile: rendered with Polaris's directives, submitted
    with qsub to the emulator, every check passed; the verdict in `orch sites show` and in SQL."""
    out = tmp_path / "rehearsal"
    run_orch("sites", "rehearsal", "polaris", "-o", str(out), cwd=tmp_path, env={"PATH": os.environ["PATH"]},
             check=True)
    run_env = {"PATH": f"{out.resolve() / 'pbs-bin'}{os.pathsep}{os.environ['PATH']}",
               "PBS_EMU_HOME": str(out / "pbs-server"), "ORCH_POLARIS_PROJECT": "myproj"}
    proc = run_orch("--sites-dir", str(out), "sites", "probe", "polaris", "--json", cwd=tmp_path, env=run_env,
                    timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = json.loads(proc.stdout)["probes"][0]
    assert probe["passed"] and probe["job_id"].endswith(".pbs01") and probe["scheduler"] == "pbs", probe["checks"]
    assert probe["allreduce_backend"] == "gloo" and probe["run_dir_visible"] and probe["nodes"] == 1
    script = (Path(probe["run_dir"]) / "job.sh").read_text()
    assert "#PBS -l select=1:system=polaris\n" in script and "#PBS -A myproj\n" in script
    assert "-m workloads.probe" in script
    shown = run_orch("--sites-dir", str(out), "sites", "show", "polaris", cwd=tmp_path, env=run_env, check=True)
    assert f"probe: #{probe['id']} passed" in shown.stdout
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT site, passed, torch, report FROM site_probes",
                               cwd=tmp_path, env=run_env, check=True).stdout)
    assert len(rows) == 1 and rows[0]["passed"] and rows[0]["torch"] and '"probe"' in rows[0]["report"]
