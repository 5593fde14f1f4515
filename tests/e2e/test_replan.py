"""Re-planning on the local site: runs not yet submitted follow the profile both ways, runs
cancelled before submission come back, and a dry run changes nothing.

(The account story, submitted and run on the sandbox cluster, is tests/slurm/test_replan.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write

SITE = """\
name: mine
description: the local machine under another name (tests)
scheduler: local
max_nodes: 1
device: {{type: cpu, model: host-cpu, per_node: 2, precisions: [{precisions}]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: torchrun}}
"""

SWEEP = """\
name: rp
experiments:
  - name: g
    workload: gemm
    sites: [mine]
    grid:
      precision: [fp32, bf16]
      m: 64
"""


def _orch(workdir: Path, *args: str, check: bool = True):
    return run_orch(*args, cwd=workdir, env={"ORCH_SITES_PATH": str(workdir / "sites")}, check=check)


def _plan(workdir: Path, sweep: Path, *extra: str) -> dict:
    return json.loads(_orch(workdir, "plan", str(sweep), "--json", *extra).stdout)


def _by_precision(out: dict) -> dict[str, dict]:
    return {r["precision"]: r for r in out["runs"]}


def test_a_profile_that_drops_a_precision_skips_its_planned_run_and_removes_its_script(workdir: Path) -> None:
    write(workdir / "sites" / "mine.yaml", SITE.format(precisions="fp32, bf16"))
    sweep = write(workdir / "s.yaml", SWEEP)
    first = _by_precision(_plan(workdir, sweep))
    assert first["bf16"]["status"] == "planned"
    bf16_dir = Path(json.loads(_orch(workdir, "sql", "-f", "json", "SELECT run_dir FROM runs WHERE precision = "
                                     "'bf16'").stdout)[0]["run_dir"])
    assert (bf16_dir / "job.sh").exists()

    write(workdir / "sites" / "mine.yaml", SITE.format(precisions="fp32"))
    dry = _plan(workdir, sweep, "--dry-run")  # a dry run says what the plan is and records nothing
    assert dry["changed"] == {} and _by_precision(dry)["bf16"]["status"] == "skipped"
    assert (bf16_dir / "job.sh").exists()
    second = _plan(workdir, sweep)
    assert second["changed"] == {"planned -> skipped": 1}
    assert "precision bf16 not supported" in _by_precision(second)["bf16"]["reason"]
    assert not (bf16_dir / "job.sh").exists()  # nothing stale left to submit
    assert json.loads((bf16_dir / "spec.json").read_text())["skip_reason"].startswith("precision bf16")
    rows = json.loads(_orch(workdir, "sql", "-f", "json", "SELECT precision, status, script FROM runs").stdout)
    assert {r["precision"]: (r["status"], r["script"] is None) for r in rows} == {
        "fp32": ("planned", False), "bf16": ("skipped", True)}

    write(workdir / "sites" / "mine.yaml", SITE.format(precisions="fp32, bf16"))
    third = _plan(workdir, sweep)
    assert third["changed"] == {"skipped -> planned": 1} and (bf16_dir / "job.sh").exists()
    assert "planned 0 new" in _orch(workdir, "plan", str(sweep)).stdout


def test_runs_cancelled_before_submission_are_planned_again(workdir: Path) -> None:
    write(workdir / "sites" / "mine.yaml", SITE.format(precisions="fp32, bf16"))
    sweep = write(workdir / "s.yaml", SWEEP)
    _plan(workdir, sweep)
    _orch(workdir, "cancel", "--sweep", "rp")
    nothing = _orch(workdir, "submit", check=False)
    assert nothing.returncode == 1 and "2 cancelled" in nothing.stderr
    again = _plan(workdir, sweep)
    assert again["changed"] == {"cancelled -> planned": 2}
    assert {r["status"] for r in again["runs"]} == {"planned"}
    assert len(json.loads(_orch(workdir, "submit", "--dry-run", "--json").stdout)["would_submit"]) == 2
