"""`orch again` on `local` (issue 51): a finished sweep repeated as its next epoch, re-rendered from
its site's profile as it is now, each attempt keeping what it ran with; refused while an epoch
is not over; a dry run changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO, run_orch, write

SWEEP = """\
name: again
experiments:
  - name: gemm
    workload: gemm
    sites: [lab]
    walltime: "00:05:00"
    grid: {devices: 1, precision: fp32, m: 64, n: 64, k: 64, warmup: 1, iters: 3}
"""


def _profile(sites: Path, extra: str = "") -> None:
    text = (REPO / "sites" / "local.yaml").read_text().replace("name: local", "name: lab", 1)
    write(sites / "lab.yaml", text + extra)


def test_again_repeats_a_finished_sweep_as_its_next_epoch(workdir: Path) -> None:
    sites = workdir / "sites"
    _profile(sites)
    env = {"OMP_NUM_THREADS": "1"}

    def orch(*args: str, check: bool = True):  # type: ignore[no-untyped-def]
        return run_orch("--sites-dir", str(sites), *args, cwd=workdir, env=env, check=check)

    orch("run", str(write(workdir / "again.yaml", SWEEP)), "--interval", "0.3")
    dry = json.loads(orch("again", "again", "--dry-run", "--json").stdout)
    assert (dry["epoch"], len(dry["planned"]), dry["submitted"], dry["rerendered"]) == (2, 1, [], 0)

    _profile(sites, "env:\n  ORCH_NIGHTLY_MARK: swapped-module\n")  # the site changed since epoch 1
    started = json.loads(orch("again", "again", "--json").stdout)
    assert (started["epoch"], len(started["submitted"]), started["rerendered"]) == (2, 1, 1)
    busy = orch("again", "again", check=False)  # epoch 2 is submitted, not over: nothing is done twice
    assert busy.returncode == 2 and "epoch 2 is not over" in busy.stderr and "Traceback" not in busy.stderr
    orch("status", "--sweep", "again", "--watch", "--interval", "0.3")

    rows = json.loads(orch("sql", "--format", "json",
                           "SELECT a.epoch, a.number, a.state, a.profile_hash, a.orch_version, s.text AS script "
                           "FROM attempts a JOIN scripts s ON s.sha256 = a.script_hash ORDER BY a.number").stdout)
    assert [(r["epoch"], r["number"], r["state"]) for r in rows] == [(1, 1, "completed"), (2, 2, "completed")]
    assert rows[0]["profile_hash"] != rows[1]["profile_hash"] and all(r["orch_version"] for r in rows)
    assert "ORCH_NIGHTLY_MARK" not in rows[0]["script"] and "ORCH_NIGHTLY_MARK" in rows[1]["script"]
    results = json.loads(orch("sql", "--format", "json", "SELECT attempt, status FROM results").stdout)
    assert sorted((r["attempt"], r["status"]) for r in results) == [(1, "completed"), (2, "completed")]


def test_again_refuses_a_sweep_it_does_not_know(workdir: Path) -> None:
    proc = run_orch("again", "nosuch", cwd=workdir)
    assert proc.returncode == 2 and "sweep 'nosuch' has no runs" in proc.stderr and "Traceback" not in proc.stderr
