"""The example sweeps: one file per experiment of studies A-C (shared/reference/studies.md).

Each validates at full size on the study's sites (`orch plan --dry-run`: runs a site cannot do
are skipped with their reason, nothing fails), and its `tiny` variant runs to completion on the
embedded default through `orch run --variant tiny`, every run `completed` in the results view.

The tiny variants run three `orch run` processes at a time, each in its own working
directory (own .orch/ and SQLite database), started once for all the selected files by a
module fixture; each file's test then checks its own outcome. A variant another test file has
run already this session (D3's, D4's) is read, not run again (tests/tiny_runs.py).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_orch
from tests.tiny_runs import EXAMPLES, TinyRun, shared_root, tiny_run

STUDY_FILES = sorted(p.name for p in EXAMPLES.glob("[ABCD][0-9]-*.yaml"))
EXPERIMENTS = ([f"A{i}" for i in range(1, 7)] + [f"B{i}" for i in range(1, 7)] + [f"C{i}" for i in range(1, 6)]
               + [f"D{i}" for i in range(1, 5)])
PARALLEL = 3


def test_one_file_per_experiment_of_studies_a_to_d() -> None:
    assert [name.split("-", 1)[0] for name in STUDY_FILES] == sorted(EXPERIMENTS)
    for name in STUDY_FILES:
        text = (EXAMPLES / name).read_text()
        study, number = name[0], name[1]
        assert text.startswith(f"# Study {study}.{number} "), f"{name}: the header cites its experiment"
        data = yaml.safe_load(text)
        assert data["name"] == name.removesuffix(".yaml")
        assert data["variants"]["tiny"]["sites"] == ["local"], name


@pytest.mark.parametrize("example", STUDY_FILES + ["quickstart.yaml"])
def test_full_size_plan_validates(workdir: Path, example: str) -> None:
    proc = run_orch("plan", str(EXAMPLES / example), "--dry-run", "--json", cwd=workdir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)
    runs = plan["runs"]
    assert runs and plan["new"] == 0  # a dry run records nothing
    assert not (workdir / ".orch" / "runs" / plan["sweep"]).exists()
    for run in runs:
        assert run["status"] in ("planned", "skipped")
        assert run["status"] == "planned" or run["reason"], run  # every skip says why
    if example != "quickstart.yaml":  # full size runs on the study's sites, not on this machine
        assert all(r["site"] != "local" for r in runs)


@pytest.fixture(scope="module")
def tiny_outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, TinyRun]:
    """Every selected file's tiny variant, PARALLEL files at a time (tests/tiny_runs.py: a file
    another test has run already this session is read, not run again)."""
    selected = [item.callspec.params["example"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_tiny_variant_runs_on_local"
                and hasattr(item, "callspec")]
    root = shared_root(tmp_path_factory)
    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(zip(selected, pool.map(lambda name: tiny_run(root, name), selected)))


# pytest-timeout's limit (pyproject: 900 s) covers a test's set-up too, and the first of these tests
# sets up every example's tiny run (about 10 min on a quiet 2-core machine, past 15 on a busy one:
# a fresh clone's suite beside other work errored all 21 here at 900 s). Each `orch run` keeps its
# own limit (tests/tiny_runs.py), so a hung run still fails.
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("example", STUDY_FILES)
def test_tiny_variant_runs_on_local(tiny_outcomes: dict[str, TinyRun], example: str) -> None:
    outcome = tiny_outcomes[example]
    sweep = example.removesuffix(".yaml") + "-tiny"
    runs = outcome.plan["runs"]
    assert outcome.plan["sweep"] == sweep and runs
    assert all(r["status"] == "planned" and r["site"] == "local" for r in runs), \
        [(r["experiment"], r["reason"]) for r in runs if r["status"] != "planned"]

    assert outcome.returncode == 0, outcome.stdout[-4000:] + outcome.stderr[-4000:]
    assert f"results of {sweep}" in outcome.stdout

    rows = outcome.rows
    assert len(rows) == len(runs), (len(rows), len(runs))
    bad = [(r["experiment"], r["status"], r["failure_class"]) for r in rows if r["status"] != "completed"]
    assert not bad, bad
    for row in rows:
        assert row["sweep"] == sweep and row["site"] == "local"
        figures = [row[k] for k in ("tokens_per_s", "samples_per_s", "tflops", "bandwidth_gbs")]
        assert any(f is not None and f > 0 for f in figures), row
        assert row["peak_mem_gb"] and row["peak_mem_gb"] > 0
    assert {r["experiment"] for r in rows} == {r["experiment"] for r in runs}

