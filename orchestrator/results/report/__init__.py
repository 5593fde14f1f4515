"""``orch report``: the studies' figures from what the database holds, in one offline page.

    source.py   which views and columns exist; the sweep filter; labels
    figures/    one builder per figure, reading its view with SQL (or saying why not drawn)
    draw.py     matplotlib (Agg): the figure, its SVG for the page, SVG and PNG files
    page.py     provenance of the runs behind the marks; the HTML (report/templates/report.html.j2)

A page written to ``-o report.html`` is self-contained; ``-o DIR/`` writes
``DIR/index.html`` and each figure as ``DIR/figures/<name>.svg`` and ``.png`` for papers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from markupsafe import Markup
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from orchestrator import __version__
from orchestrator.errors import UserError
from orchestrator.results.report.model import FigureData, Skip
from orchestrator.results.report.source import Source


@dataclass
class ReportSummary:
    page: Path
    drawn: list[str]
    skipped: list[Skip]
    files: list[Path] = field(default_factory=list)
    runs: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def build_report(engine: Engine, output: Path, directory: bool, sweeps: list[str] | None = None,
                 database: str = "") -> ReportSummary:
    """Write the report of ``sweeps`` (all when empty) to ``output``: a page, or with
    ``directory`` a folder with index.html and figures/. Raises UserError for a sweep the
    database has no results of, or an output that cannot be written."""
    from orchestrator.results.report import draw, figures, page

    clock = time.perf_counter()
    seconds: dict[str, float] = {}
    src = Source(engine, sweeps or [])
    known = src.known_sweeps()
    unknown = [s for s in src.sweeps if s not in known]
    if unknown:
        raise UserError(f"--sweep {unknown[0]}: no results of this sweep in the database "
                        f"({'sweeps with results: ' + ', '.join(known) if known else 'it has no results yet'})")
    built: list[FigureData] = []
    skipped: list[Skip] = []
    for key, builder in figures.BUILDERS.items():
        try:
            result = builder(src)
        except DBAPIError as exc:  # a view that exists but cannot be read as expected
            result = Skip(key, builder.__name__.replace("_", " "), f"query failed: {str(exc.orig).splitlines()[0]}")
        if isinstance(result, FigureData) and not any(p.points for panel in result.panels for p in panel.series):
            result = Skip(result.key, result.title, "no value to draw (the view's figures are empty)")
        if isinstance(result, FigureData):
            built.append(result)
        else:
            skipped.append(result)
    from orchestrator.results.report.regressions import regression_figures  # change points (issue 51)

    built += regression_figures(engine, src.sweeps)
    seconds["queries"] = time.perf_counter() - clock

    clock = time.perf_counter()
    run_ids = set().union(*(f.run_ids() for f in built)) if built else set()
    runs = page.provenance(src, run_ids)
    sweep_files = page.sweep_files(src, (r.get("sweep_hash") for r in runs.values()))
    tips = {run_id: page.tooltip(p) for run_id, p in runs.items()}
    seconds["provenance"] = time.perf_counter() - clock

    target = output / "index.html" if directory else output
    figure_dir = output / "figures"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if directory and built:
            figure_dir.mkdir(exist_ok=True)
    except OSError as exc:
        raise UserError(f"{output}: cannot create ({exc.strerror or exc})") from None

    clock = time.perf_counter()
    rendered: list[page.RenderedFigure] = []
    files: list[Path] = []
    draw_s = files_s = 0.0
    for data in built:
        t0 = time.perf_counter()
        fig = draw.render(data)
        document = draw.svg_text(fig)
        svg = Markup(draw.inline_svg(document, f"f{len(rendered)}", tips, data.title))
        t1 = time.perf_counter()
        links = []
        if directory:
            svg_path, png_path = figure_dir / f"{data.key}.svg", figure_dir / f"{data.key}.png"
            _write(svg_path, document.encode())
            _write(png_path, draw.png_bytes(fig))
            files += [svg_path, png_path]
            links = [f"figures/{data.key}.svg", f"figures/{data.key}.png"]
        files_s += time.perf_counter() - t1
        draw_s += t1 - t0
        rendered.append(page.RenderedFigure(data, svg, links))
    seconds["drawing"] = draw_s
    seconds["figure_files"] = files_s

    clock = time.perf_counter()
    results = src.query(f"SELECT COUNT(*) AS n FROM results WHERE 1=1{src.where_sweep()}")[0]["n"]
    meta = {"title": "orch report" + (f": {', '.join(src.sweeps)}" if src.sweeps else ""),
            "version": __version__, "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "database": database, "sweeps": ", ".join(src.sweeps) if src.sweeps else f"all ({', '.join(known)})",
            "results": results, "empty": "the database has no results yet (orch run SWEEP)",
            "scripts_note": (f"{len(runs)} runs: scripts and specs are not copied into the page beyond "
                             f"{page.MAX_SCRIPTS} runs; each run directory holds them")
            if len(runs) > page.MAX_SCRIPTS else ""}
    html = page.render_page(rendered, skipped, runs, sweep_files, meta)
    _write(target, html.encode())
    seconds["html"] = time.perf_counter() - clock
    return ReportSummary(target, [f.key for f in built], skipped, files, len(runs), seconds)


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise UserError(f"{path}: cannot write ({exc.strerror or exc})") from None
