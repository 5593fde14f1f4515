"""Re-planning reconciles, played on the real sandbox cluster as a new user meets it.

The story of issue 24: a sweep planned before the account was set is recorded skipped; setting
the account and planning again must make its runs planned (and `orch run` must run them), and
a profile fixed after planning must reach the run directory's ``job.sh`` before submission.
Nothing submitted is exit 1, with the reason.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.conftest import write
from tests.slurm.test_orch_on_sandbox import TRIVIAL_PYTHON, sql

SITE = """\
name: acct
description: the sandbox cluster with a stand-in python and a required account (tests)
scheduler: slurm
python: {python}
max_nodes: 4
device: {{type: cpu, model: sandbox-cpu, per_node: 2, precisions: [fp32]}}
queues: [{{name: debug, max_nodes: 4, max_walltime: "01:00:00"}}]
launcher: {{name: srun}}
account: {{env: ORCH_TEST_REPLAN_ACCOUNT, required: true, qos_env: null}}
setup: ["echo {marker}"]
directives: ["--mem=400M"]
"""

SWEEP = """\
name: replan
experiments:
  - name: g
    workload: gemm
    sites: [acct]
    walltime: '00:05:00'
    grid:
      m: [1, 2, 3]
"""


def test_a_replan_after_setting_the_account_and_fixing_the_profile_runs_the_new_script(cluster, tmp_path: Path
                                                                                       ) -> None:
    from tests.conftest import run_orch

    fake = write(tmp_path / "fake-python", TRIVIAL_PYTHON.format(python=__import__("sys").executable))
    fake.chmod(0o755)

    def site(marker: str) -> None:
        write(tmp_path / "sites" / "acct.yaml", SITE.format(python=fake, marker=marker))

    def orch(*args: str, account: bool = False, check: bool = False):
        env = {"ORCH_SITES_PATH": str(tmp_path / "sites")}
        if account:
            env["ORCH_TEST_REPLAN_ACCOUNT"] = "root"  # an account the sandbox's accounting knows
        return run_orch(*args, cwd=tmp_path, env=env, check=check)

    site("setup-v1")
    sweep = write(tmp_path / "s.yaml", SWEEP)

    # 1. No account: every run is recorded skipped, with the variable to set.
    first = json.loads(orch("plan", str(sweep), "--json", check=True).stdout)
    assert first["new"] == 3 and {r["status"] for r in first["runs"]} == {"skipped"}
    assert all("ORCH_TEST_REPLAN_ACCOUNT" in r["reason"] for r in first["runs"])
    submitted = orch("submit")
    assert submitted.returncode == 1, submitted.stdout + submitted.stderr
    assert "nothing to submit" in submitted.stderr and "ORCH_TEST_REPLAN_ACCOUNT" in submitted.stderr
    ran = orch("run", str(sweep))
    assert ran.returncode == 1 and "nothing to run" in ran.stderr, ran.stdout + ran.stderr
    run_dirs = [Path(r["run_dir"]) for r in sql(orch, "SELECT run_dir FROM runs")]
    assert run_dirs and not any((d / "job.sh").exists() for d in run_dirs)

    # 2. The account is set: the same runs become planned, with scripts that name it.
    second = json.loads(orch("plan", str(sweep), "--json", account=True, check=True).stdout)
    assert second["new"] == 0 and second["changed"] == {"skipped -> planned": 3}
    assert {r["status"] for r in second["runs"]} == {"planned"}
    assert {r["status"] for r in sql(orch, "SELECT status FROM runs")} == {"planned"}
    for run_dir in run_dirs:
        script = (run_dir / "job.sh").read_text()
        assert "--account=root" in script and "echo setup-v1" in script
        assert json.loads((run_dir / "spec.json").read_text())["skip_reason"] is None

    # 3. The profile is fixed before submission: the run directory's job.sh has the new line,
    #    and the database's script is the file's.
    site("setup-v2")
    third = json.loads(orch("plan", str(sweep), "--json", account=True, check=True).stdout)
    assert third["changed"] == {"scripts re-rendered": 3}
    text = orch("plan", str(sweep), account=True, check=True).stdout
    assert "re-planned" not in text  # nothing changed since: nothing to say
    for row in sql(orch, "SELECT run_dir, script_hash FROM runs"):
        script = (Path(row["run_dir"]) / "job.sh").read_text()
        assert "echo setup-v2" in script and "setup-v1" not in script
        assert hashlib.sha256(script.encode()).hexdigest() == row["script_hash"]

    # 4. orch run submits those scripts on the cluster and they run.
    done = orch("run", str(sweep), "--json", account=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {r["status"] for r in json.loads(done.stdout)} == {"completed"}
    for run_dir in run_dirs:
        assert "setup-v2" in (run_dir / "stdout.log").read_text()

    # 5. Finished runs are never touched by a later re-plan.
    site("setup-v3")
    fourth = json.loads(orch("plan", str(sweep), "--json", account=True, check=True).stdout)
    assert fourth["changed"] == {} and fourth["kept"] == {"finished": 3}
    assert {r["status"] for r in fourth["runs"]} == {"finished"}
    assert all("setup-v2" in (d / "job.sh").read_text() for d in run_dirs)
    again = orch("submit", account=True)
    assert again.returncode == 1 and "3 finished" in again.stderr
