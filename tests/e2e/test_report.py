"""`orch report` on real runs, opened in headless Chromium.

One database is filled once for the module by real local runs: a 1/2/4-process GEMM
scaling sweep with one run that overruns its walltime (a real timeout), and the tiny
variants of the C.4 all-reduce and A.3 sequence-length examples, three `orch run`
processes side by side on one SQLite file, and the scaling sweep's means taken as reference
figures (`orch references from-sweep`). The page is then built from it and checked
in Chromium (Debian's package; scripts/setup.sh installs it): nothing logged to the
console, a drawn mark with a provenance link in every figure, the scaling efficiencies
the scaling view holds, only the figures the data supports. The screenshot's path is printed
(pytest's temporary folder); it is also copied to $ORCH_TEST_ARTIFACTS when that is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO, run_orch, write

SCALING = """\
name: report-scaling
experiments:
  - name: gemm-scaling
    workload: gemm
    sites: [local]
    walltime: "00:05:00"
    grid: {devices: [1, 2, 4], m: 128, n: 128, k: 128, warmup: 2, iters: 5}
  - name: gemm-overrun          # cannot finish in 4 s: a real timeout for the failures figure
    workload: gemm
    sites: [local]
    walltime: "00:00:04"
    grid: {devices: 1, m: 2048, n: 2048, k: 2048, warmup: 1, iters: 100000}
"""
EXAMPLES = ["C4-allreduce.yaml", "A3-sequence-length.yaml"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
# Records script errors and failed loads (window 'error' events, capture phase) into the DOM for --dump-dom.
RECORDER = ("<script>window.__errors=[];addEventListener('error',function(e){__errors.push(String(e.message||"
            "(e.target&&(e.target.src||e.target.href))||e.type))},true);var ce=console.error;console.error="
            "function(){__errors.push([].join.call(arguments,' '));ce.apply(console,arguments)};"
            "addEventListener('load',function(){document.body.setAttribute('data-errors',JSON.stringify(__errors))})"
            "</script>")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory whose database holds the runs above, with report.html and out/ built."""
    workdir = tmp_path_factory.mktemp("report")
    # One torch thread per process; a ledger of cores of this test's own, so its runs do not queue
    # behind other suites' local runs, and room for 4 processes at once (this test checks
    # figures, not timings).
    env = {"OMP_NUM_THREADS": "1", "ORCH_LOCAL_CORES_DIR": str(workdir / "cores"), "ORCH_LOCAL_CORES": "4"}
    sweep = write(workdir / "scaling.yaml", SCALING)
    commands = [[str(sweep)]] + [[str(REPO / "examples" / name), "--variant", "tiny"] for name in EXAMPLES]
    with ThreadPoolExecutor(len(commands)) as pool:
        procs = list(pool.map(lambda args: run_orch("run", *args, "--interval", "0.5", cwd=workdir, env=env,
                                                    timeout=400), commands))
    assert procs[0].returncode == 1, procs[0].stdout[-3000:] + procs[0].stderr[-3000:]  # the overrun failed
    for proc in procs[1:]:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The scaling sweep's own means as reference figures: the references figure gets real ratios.
    run_orch("references", "from-sweep", "report-scaling", cwd=workdir, check=True)
    run_orch("report", "-o", "report.html", cwd=workdir, check=True)
    run_orch("report", "-o", "out/", cwd=workdir, check=True)
    return workdir


def sql(workdir: Path, query: str) -> list[dict]:
    return json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, check=True).stdout)


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "Chromium is missing: scripts/setup.sh installs Debian's package (apt-get install chromium)"
    profile.mkdir(parents=True, exist_ok=True)
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=120)


def figure_sections(html: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="fig-[^"]+" class="report-figure" data-figure="([^"]+)">(.*?)</section>',
                           html, re.S))


def table_rows(html: str, figure: str) -> list[dict[str, str]]:
    """The data attributes of each row of a figure's table of numbers."""
    body = re.search(rf'<table class="data" data-figure="{figure}">(.*?)</table>', html, re.S)
    assert body, f"no table of numbers for {figure}"
    return [dict(re.findall(r'data-([a-z-]+)="([^"]*)"', attrs)) for attrs in re.findall(r"<tr( [^>]*)>", body[1])]


def test_page_opens_in_chromium_with_marks_in_every_figure(built: Path) -> None:
    page = built / "report.html"
    html = page.read_text()
    # Offline: nothing fetched from anywhere (no script, stylesheet, image or font by URL).
    assert not re.search(r'<(script|link|img|iframe)\b', html)
    assert not re.search(r'(src|href)="(https?:)?//', html)

    checked = built / "checked.html"  # the page with an error recorder in front of it
    checked.write_text(html.replace("<head>", "<head>" + RECORDER, 1))
    dom = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", checked.as_uri(), profile=built / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
               or "Failed to load resource" in line or "net::ERR" in line]
    assert not console, console
    recorded = re.search(r'<body[^>]*data-errors="([^"]*)"', dom.stdout)
    assert recorded, "the page did not finish loading"
    assert json.loads(recorded[1].replace("&quot;", '"')) == []

    sections = figure_sections(dom.stdout)
    assert len(sections) >= 5, sorted(sections)
    for name, section in sections.items():
        links = re.findall(r'<a [^>]*class="run-link"[^>]*>(.*?)</a>', section, re.S)
        marks = [link for link in links if "<use" in link or "<path" in link]
        assert marks, f"figure {name} has no drawn mark"
    # Every mark and table row leads to an anchor in the provenance table of the same page.
    targets = set(re.findall(r'href="#(run-[0-9a-f]+)"', html))
    anchors = set(re.findall(r'<tr id="(run-[0-9a-f]+)"', html))
    assert targets and targets <= anchors, sorted(targets - anchors)[:5]

    shot = built / "report.png"
    snap = chromium("--window-size=1200,3000", f"--screenshot={shot}", page.as_uri(), profile=built / "profile-shot")
    assert snap.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", snap.stderr[-2000:]
    keep = os.environ.get("ORCH_TEST_ARTIFACTS")  # a folder CI keeps; else pytest's temporary one
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shot = Path(shutil.copy(shot, Path(keep) / "report.png"))
    print(f"screenshot of the report: {shot}")


def test_scaling_figure_shows_the_views_efficiencies(built: Path) -> None:
    view = sql(built, "SELECT mode, devices, speedup, efficiency FROM scaling WHERE sweep = 'report-scaling'")
    assert sorted(r["devices"] for r in view) == [1, 2, 4]
    shown = [r for r in table_rows((built / "report.html").read_text(), "scaling") if r.get("devices")]
    by_devices = {(r["mode"], float(r["devices"])): r for r in shown}
    for row in view:
        page = by_devices[(row["mode"], float(row["devices"]))]
        assert float(page["efficiency"]) == pytest.approx(row["efficiency"], rel=1e-12)
        assert float(page["speedup"]) == pytest.approx(row["speedup"], rel=1e-12)
        run_ids = {r["run_id"] for r in sql(built, f"SELECT run_id FROM results WHERE sweep = 'report-scaling' "
                                                   f"AND devices = {row['devices']} AND status = 'completed'")}
        assert page["run"] in run_ids


def test_only_figures_with_data_are_drawn(built: Path) -> None:
    html = (built / "report.html").read_text()
    drawn = set(figure_sections(html))
    assert {"throughput", "scaling", "seq_len", "primitives", "collectives", "failures", "loss_curve"} <= drawn
    skipped = set(re.findall(r'data-skipped="([^"]+)"', html))
    # No GAS sweep, no strategy comparison, no inference run.
    assert {"grad_accum", "strategies", "inference"} <= skipped
    assert not drawn & skipped and drawn | skipped >= {"cost", "predictions", "references"}
    # Drawn exactly when their view has rows for them (views a schema may not have yet count as empty).
    for figure, query in (("cost", "SELECT COUNT(*) AS n FROM cost WHERE price_per_device_hour IS NOT NULL"),
                          ("predictions", "SELECT COUNT(*) AS n FROM prediction_error "
                                          "WHERE predicted_peak_gb > 0 AND measured_peak_gb > 0"),
                          ("references", "SELECT COUNT(*) AS n FROM reference_check WHERE ratio IS NOT NULL")):
        proc = run_orch("sql", "-f", "json", query, cwd=built)
        rows = json.loads(proc.stdout)[0]["n"] if proc.returncode == 0 else 0
        assert (figure in drawn) == (rows > 0), (figure, rows)
    failures = table_rows(html, "failures")
    assert [r["failure-class"] for r in failures] == ["timeout"]

    # Throughput bars carry repeat_spread's means.
    spread = {r["mean"] for r in sql(built, "SELECT mean FROM repeat_spread")}
    assert {float(r["mean"]) for r in table_rows(html, "throughput")} == spread


def test_references_figure_shows_the_views_ratios(built: Path) -> None:
    view = sql(built, "SELECT run_id, ratio, verdict FROM reference_check")
    assert view  # every completed run of the scaling sweep against its configuration's mean
    shown = {r["run"]: float(r["ratio"]) for r in table_rows((built / "report.html").read_text(), "references")}
    assert shown == {r["run_id"]: pytest.approx(r["ratio"], rel=1e-12) for r in view}


def test_gemm_only_sweep_gets_the_primitive_figures(built: Path) -> None:
    proc = run_orch("report", "--sweep", "report-scaling", "-o", "gemm.html", cwd=built, check=True)
    html = (built / "gemm.html").read_text()
    drawn = set(figure_sections(html))
    assert {"summary", "throughput", "scaling", "primitives", "failures"} <= drawn, proc.stderr
    assert list(figure_sections(html))[0] == "summary"  # the section management reads first
    # and, where their views have rows: cost (a priced site), predictions (plan-time predictions),
    # references (taken from this sweep by the fixture)
    assert drawn <= {"summary", "throughput", "scaling", "primitives", "failures", "cost", "predictions",
                     "references"}, proc.stderr
    runs = {r["run_id"] for r in sql(built, "SELECT run_id FROM results WHERE sweep = 'report-scaling'")}
    assert set(re.findall(r'<tr id="run-([0-9a-f]+)"', html)) == runs


def test_directory_form_writes_svg_and_png_per_figure(built: Path) -> None:
    out = built / "out"
    index = (out / "index.html").read_text()
    names = set(figure_sections(index))
    assert names
    for name in names:
        svg, png = out / "figures" / f"{name}.svg", out / "figures" / f"{name}.png"
        assert ET.parse(svg).getroot().tag.endswith("svg")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f'href="figures/{name}.png"' in index


def test_unknown_sweep_is_one_line_and_exit_2(built: Path) -> None:
    proc = run_orch("report", "--sweep", "nope", "-o", "x.html", cwd=built)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --sweep nope: no results of this sweep") and "report-scaling" in proc.stderr
    assert "Traceback" not in proc.stderr and not (built / "x.html").exists()


@pytest.mark.postgres
def test_report_on_postgresql(pg_admin_url: str, tmp_path: Path) -> None:
    """The same queries on PostgreSQL, over rows made as the benchmark makes them (benchmarks/
    bench_report.py: GEMM metrics files collected as `orch status` does, the rest by SQL), with
    the per-run figures sampled (more runs than a figure draws)."""
    from benchmarks.bench_report import fill
    from orchestrator.results.db.engine import make_engine, open_database
    from orchestrator.results.report.model import MAX_POINTS
    from tests import pg

    generator = pg.fresh_database(pg_admin_url)
    url = next(generator)
    try:
        sessions = open_database(url)
        fill(sessions, MAX_POINTS * 3, 200, tmp_path / "metrics")
        sessions.kw["bind"].dispose()
        proc = run_orch("report", "-o", "pg.html", cwd=tmp_path, env={"ORCH_DB_URL": url}, check=True)
        html = (tmp_path / "pg.html").read_text()
        drawn = set(figure_sections(html))
        assert {"throughput", "scaling", "strategies", "seq_len", "primitives", "failures"} <= drawn, proc.stderr
        assert re.search(r"750 results: one in 2 by run id is drawn \(375;", html)  # the stated sampling rule
        engine = make_engine(url)
        with engine.connect() as conn:
            import sqlalchemy as sa

            view = {(r.mode, r.devices, r.efficiency) for r in conn.execute(sa.text(
                "SELECT mode, devices, efficiency FROM scaling"))}
        engine.dispose()
        shown = {(r["mode"], int(r["devices"]), float(r["efficiency"])) for r in table_rows(html, "scaling")}
        assert shown and shown <= view
        targets = set(re.findall(r'href="#(run-[0-9a-z]+)"', html))
        assert targets <= set(re.findall(r'<tr id="(run-[0-9a-z]+)"', html))
    finally:
        next(generator, None)
