"""`orch plan` of a campaign-sized sweep through the real CLI: a summary that fits on a screen
with the right counts, every run with --json and --all, and recording in bulk (SQLite and
PostgreSQL) that adds nothing the second time."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

from sqlalchemy import create_engine, text

from orchestrator.cli.plansummary import reason_kind
from tests.conftest import run_orch, write

# 4 sites x 4 device counts x 3 precisions x 104 sizes x 2 x 2 = 19,968 runs; some skipped
# (fp16 on the CPU site, 8 devices on a 4-device site, Polaris without a project).
LARGE = """\
name: campaign
experiments:
  - name: gemm-grid
    workload: gemm
    sites: [local, sandbox, polaris, baskerville]
    grid:
      devices: [1, 2, 4, 8]
      precision: [fp32, bf16, fp16]
      m: [%s]
      n: [64, 128]
      k: [64, 128]
""" % ", ".join(str(64 + i) for i in range(104))
RUNS = 4 * 4 * 3 * 104 * 2 * 2
ENV = {"ORCH_BASKERVILLE_ACCOUNT": "proj1", "ORCH_BASKERVILLE_QOS": "normal"}


def test_a_large_plan_prints_a_summary_on_one_screen_with_the_right_counts(workdir: Path) -> None:
    sweep = write(workdir / "campaign.yaml", LARGE)
    runs = json.loads(run_orch("plan", str(sweep), "--dry-run", "--json", cwd=workdir, env=ENV, check=True).stdout)
    runs = runs["runs"]
    assert len(runs) == RUNS and len({r["run_id"] for r in runs}) == RUNS

    out = run_orch("plan", str(sweep), "--dry-run", cwd=workdir, env=ENV, check=True).stdout
    lines = out.splitlines()
    assert len(lines) <= 45 and all(len(line) <= 200 for line in lines)
    skipped = [r for r in runs if r["status"] == "skipped"]
    assert lines[-1] == f"{RUNS} runs: {RUNS - len(skipped)} runnable, {len(skipped)} skipped; would plan {RUNS} new."

    # runs by site: runs, runnable, skipped, new
    for site in ("local", "sandbox", "polaris", "baskerville"):
        mine = [r for r in runs if r["site"] == site]
        gone = sum(r["status"] == "skipped" for r in mine)
        row = next(line.split() for line in lines if line.split()[:1] == [site])
        assert row == [site, str(len(mine)), str(len(mine) - gone), str(gone), str(len(mine))]

    # skipped runs by reason, numbers set aside; the largest first
    kinds = Counter(reason_kind(r["reason"]) for r in skipped)
    matches = [re.match(r"^\s+(\d+)  (.*?)(?: \(and \d+ more like it\))?$", line)
               for line in lines[lines.index(f"skipped, by reason ({len(skipped)} run(s)):") + 1:]]
    shown = [m for m in matches[:len(kinds)] if m]
    assert len(shown) == len(kinds) and [int(m[1]) for m in shown] == sorted(kinds.values(), reverse=True)
    assert all(kinds[reason_kind(m[2])] == int(m[1]) for m in shown)
    assert any("needs an account/project: set $ORCH_POLARIS_PROJECT" in m[2] for m in shown)

    # the first rows, in plan order
    first = lines.index("first 8 of %d runs:" % RUNS)
    assert [line.split()[0] for line in lines[first + 2:first + 10]] == [r["run_id"] for r in runs[:8]]


def test_all_lists_every_run(workdir: Path) -> None:
    sweep = write(workdir / "campaign.yaml", LARGE)
    out = run_orch("plan", str(sweep), "--dry-run", "--all", cwd=workdir, env=ENV, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "sweep campaign" and lines[1].split()[:2] == ["run_id", "experiment"]
    listing, tail = lines[2:2 + RUNS], lines[2 + RUNS:]
    assert len({line.split()[0] for line in listing}) == RUNS
    # After the listing only the summary: the predicted cost where there is one, then the counts.
    assert tail and tail[-1].startswith(f"{RUNS} runs:") and len(tail) <= 2
    assert all(line.startswith("predicted:") for line in tail[:-1])


def test_recording_in_bulk_then_replanning_adds_nothing(workdir: Path, db_url: str) -> None:
    sweep = write(workdir / "s.yaml", LARGE.replace("m: [%s]" % ", ".join(str(64 + i) for i in range(104)),
                                                    "m: [64, 96, 128]"))
    env = {**ENV, "ORCH_DB_URL": db_url}
    first = json.loads(run_orch("plan", str(sweep), "--json", cwd=workdir, env=env, check=True).stdout)
    second = json.loads(run_orch("plan", str(sweep), "--json", cwd=workdir, env=env, check=True).stdout)
    total = 4 * 4 * 3 * 3 * 2 * 2
    assert first["new"] == total and second["new"] == 0 and len(second["runs"]) == total

    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(text("SELECT * FROM runs"))}
    engine.dispose()
    assert len(rows) == total
    for listed in first["runs"]:
        row = rows[listed["run_id"]]
        assert (row.status, row.site, row.devices, row.precision, row.nodes, row.queue) == (
            listed["status"], listed["site"], listed["devices"], listed["precision"], listed["nodes"],
            listed["queue"])
        assert row.created_at is not None and (row.skip_reason or "") == listed["reason"]
        run_dir = Path(row.run_dir)
        spec = json.loads((run_dir / "spec.json").read_text())
        assert spec == {**json.loads(row.spec), "skip_reason": row.skip_reason}
        assert json.loads(row.params) == spec["params"]
        script = run_dir / "job.sh"
        if row.status == "planned":
            assert script.read_text() == row.script and os.stat(script).st_mode & 0o777 == 0o755
        else:
            assert not script.exists() and row.script is None
