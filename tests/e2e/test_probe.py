"""`orch sites probe` on this machine, end to end: real CLI, real jobs through the local executor, SQLite.

The failing probes are made the way they happen on a cluster: a profile whose `python:` cannot import
torch (a wrapper that starts Python without its site-packages), and a node that does not see the run
directory orch wrote (a wrapper that removes orch's marker before the probe looks for it).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from tests.conftest import REPO, run_orch, write

LOCAL = (REPO / "sites" / "local.yaml").read_text()

SWEEP = """\
name: probed
experiments:
  - name: g
    workload: gemm
    sites: [cpuhost, local]
    walltime: "00:05:00"
    grid: {devices: 1, precision: fp32, m: 32, n: 32, k: 32, warmup: 1, iters: 2}
"""


def site(sites: Path, name: str, python: Path | None = None, launcher: str | None = None) -> Path:
    """A copy of the local profile under another name (the local site itself is never warned about)."""
    text = LOCAL.replace("name: local\n", f"name: {name}\n", 1)
    if python is not None:
        text = text.replace("max_nodes: 1\n", f"max_nodes: 1\npython: {python}\n", 1)
    if launcher is not None:
        text = text.replace("  name: torchrun\n", f"  name: {launcher}\n", 1)
    return write(sites / f"{name}.yaml", text)


def wrapper(path: Path, body: str, flags: str = "") -> Path:
    """A `python:` for a profile: a shell script that does ``body``, then starts this Python."""
    write(path, f"#!/bin/sh\n{body}\nexec {sys.executable} {flags} \"$@\"\n").chmod(0o755)
    return path


def probe(workdir: Path, sites: Path, target: str, *args: str) -> tuple[int, dict, str]:
    proc = run_orch("--sites-dir", str(sites), "sites", "probe", target, "--json", *args, cwd=workdir, timeout=300)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def sql(workdir: Path, query: str, env: dict[str, str] | None = None) -> list[dict]:
    return json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, env=env, check=True).stdout)


def test_a_probe_of_local_passes_and_is_in_show_and_sql(workdir: Path, db_url: str) -> None:
    """On SQLite and on PostgreSQL (booleans are booleans there)."""
    db = {"ORCH_DB_URL": db_url}
    proc = run_orch("sites", "probe", "local", cwd=workdir, env=db, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed" in proc.stdout and "run_dir_visible" in proc.stdout and "gloo" in proc.stdout
    assert "job" in proc.stderr  # the progress line
    rows = sql(workdir, "SELECT site, system, state, passed, failed_checks, python, torch, deepspeed, devices, "
                        "allreduce_gbs, allreduce_backend, nodes, run_dir_visible, modules, job_id, profile_hash, "
                        "report, submitted_at, finished_at FROM site_probes", db)
    assert len(rows) == 1
    row = rows[0]
    assert row["site"] == "local" and row["system"] is None and row["state"] == "finished"
    assert row["passed"] and row["failed_checks"] is None and row["run_dir_visible"]
    assert row["torch"] and row["torch"] != "absent" and row["python"].split()[0].count(".") == 2
    assert row["devices"].startswith("2 x cpu") and row["allreduce_backend"] == "gloo" and row["allreduce_gbs"] > 0
    assert row["nodes"] == 1 and row["job_id"] and row["submitted_at"] and row["finished_at"]
    assert row["profile_hash"] == hashlib.sha256((REPO / "sites" / "local.yaml").read_bytes()).hexdigest()
    report = json.loads(row["report"])
    assert report["schema"] == "orch.metrics/1" and report["probe"]["allreduce"]["ranks"] == 2
    shown = run_orch("sites", "show", "local", cwd=workdir, env=db, check=True).stdout
    assert "probe: #1 passed" in shown and "gloo, 2 ranks, 1 node(s)" in shown
    data = json.loads(run_orch("sites", "show", "local", "--json", cwd=workdir, env=db, check=True).stdout)
    assert data["name"] == "local" and data["probe"]["passed"] and data["probe"]["checks"][0]["name"] == "python"


def test_plan_warns_until_a_passing_probe_and_again_when_the_profile_changes(workdir: Path) -> None:
    sites = workdir / "sites"
    profile = site(sites, "cpuhost")
    sweep = write(workdir / "sweep.yaml", SWEEP)
    # No database yet: `sites show` says there is no probe, without making one.
    shown = run_orch("--sites-dir", str(sites), "sites", "show", "cpuhost", cwd=workdir, check=True).stdout
    assert "no probe for this profile; run `orch sites probe cpuhost`" in shown
    assert not (workdir / ".orch" / "orch.db").exists()

    def warnings() -> tuple[list[dict], str]:
        proc = run_orch("--sites-dir", str(sites), "plan", str(sweep), "--json", cwd=workdir, check=True)
        return [w for w in json.loads(proc.stdout)["warnings"] if w["check"] == "probe"], proc.stderr

    found, stderr = warnings()
    assert [w["site"] for w in found] == ["cpuhost"]  # not local, the embedded default
    assert "never probed" in found[0]["message"] and "orch sites probe cpuhost" in stderr
    code, out, _ = probe(workdir, sites, "cpuhost")
    assert code == 0 and out["passed"], out
    assert warnings()[0] == []
    proc = run_orch("--sites-dir", str(sites), "plan", str(sweep), cwd=workdir, check=True)  # the table too
    assert "probe" not in proc.stderr
    profile.write_text(profile.read_text() + "# edited: another module line, say\n")
    found, stderr = warnings()
    assert [w["site"] for w in found] == ["cpuhost"] and "changed since its last passing probe" in stderr
    shown = run_orch("--sites-dir", str(sites), "sites", "show", "cpuhost", cwd=workdir, check=True).stdout
    assert "no probe for this profile" in shown


def test_a_python_without_torch_fails_the_probe_and_says_what_to_fix(workdir: Path) -> None:
    sites = workdir / "sites"
    no_torch = wrapper(workdir / "bin" / "python-no-torch", "# no site-packages: torch cannot be imported", "-S")
    # The program itself reports (launcher python: one process), and so does torchrun's failure to start.
    site(sites, "plain", python=no_torch, launcher="python")
    site(sites, "viatorchrun", python=no_torch)
    code, out, stderr = probe(workdir, sites, "plain")
    assert code == 1 and out["passed"] is False
    row = out["probes"][0]
    assert row["failed_checks"].split(",")[0] == "torch" and row["torch"] == "absent"
    assert row["report"]["torch_error"].startswith("ModuleNotFoundError")
    proc = run_orch("--sites-dir", str(sites), "sites", "probe", "viatorchrun", cwd=workdir, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED: torch" in proc.stderr and "cannot import torch" in proc.stderr
    assert "fix: install PyTorch for" in proc.stderr
    rows = sql(workdir, "SELECT site, passed, torch FROM site_probes ORDER BY id")
    assert [(r["site"], bool(r["passed"]), r["torch"]) for r in rows] == [("plain", False, "absent"),
                                                                          ("viatorchrun", False, "absent")]


def test_a_run_directory_the_node_does_not_see_fails_the_probe(workdir: Path) -> None:
    sites = workdir / "sites"
    hide = wrapper(workdir / "bin" / "python-elsewhere", 'rm -f "$ORCH_RUN_DIR/probe-marker.txt"')
    site(sites, "elsewhere", python=hide)
    proc = run_orch("--sites-dir", str(sites), "sites", "probe", "elsewhere", cwd=workdir, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED: run_dir_visible" in proc.stderr and "ORCH_HOME" in proc.stderr
    rows = sql(workdir, "SELECT passed, run_dir_visible, torch, allreduce_gbs FROM site_probes")
    assert len(rows) == 1 and not rows[0]["passed"] and not rows[0]["run_dir_visible"]
    assert rows[0]["torch"] != "absent" and rows[0]["allreduce_gbs"] > 0  # the rest was fine


def test_no_wait_then_collect(workdir: Path) -> None:
    code, out, _ = probe(workdir, REPO / "sites", "local", "--no-wait")
    assert code == 0 and out["waiting"] == [1] and out["probes"][0]["state"] == "submitted"
    assert out["probes"][0]["job_id"]
    code, out, _ = probe(workdir, REPO / "sites", "local", "--collect")
    assert code == 0 and out["passed"] and out["probes"][0]["state"] == "finished"
    proc = run_orch("sites", "probe", "--collect", cwd=workdir, check=True)
    assert "no probe is waiting to be collected" in proc.stdout


def test_a_profile_that_cannot_run_the_probe_is_refused(workdir: Path) -> None:
    sites = workdir / "sites"
    write(sites / "acct.yaml", LOCAL.replace("name: local\n", "name: acct\naccount:\n  env: ACCT_PROJECT\n"
                                             "  required: true\n", 1))
    proc = run_orch("--sites-dir", str(sites), "sites", "probe", "acct", cwd=workdir)
    assert proc.returncode == 2 and "cannot probe acct" in proc.stderr and "ACCT_PROJECT" in proc.stderr
    proc = run_orch("sites", "probe", "local", "--nodes", "2", cwd=workdir)
    assert proc.returncode == 2 and "at most 1" in proc.stderr
