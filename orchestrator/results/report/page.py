"""The HTML page: figures inline as SVG, their numbers, and the provenance of every run a
mark stands for, in one file with nothing to fetch (no script, no font, no stylesheet
from elsewhere), so it opens offline and can be mailed or archived as it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from orchestrator.results.report.model import FigureData, Skip
from orchestrator.results.report.source import Source
from orchestrator.states import AttemptState

TEMPLATES = Path(__file__).resolve().parent / "templates"
# A run's rendered script and spec go into the page up to this many runs; beyond, the page
# names the run directory that holds them (a page of 100,000 scripts helps nobody).
MAX_SCRIPTS = 300
_CHUNK = 500


@dataclass
class RenderedFigure:
    data: FigureData
    svg: Markup
    files: list[str] = field(default_factory=list)


def provenance(src: Source, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The provenance of each run (its last finished attempt): view provenance with the run's
    spec and, for up to MAX_SCRIPTS runs, its rendered script."""
    ids = sorted(set(run_ids))
    with_text = len(ids) <= MAX_SCRIPTS
    text_columns = ", ru.spec, ru.script" if with_text else ""
    found: dict[str, dict[str, Any]] = {}
    has_view = src.missing("provenance", ["run_id", "attempt", "status"]) is None
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        if has_view:
            rows = src.query(
                "SELECT p.*, ru.experiment, ru.workload, ru.site, ru.system, ru.devices, ru.precision, ru.strategy"
                f"{text_columns} FROM provenance p JOIN runs ru ON ru.id = p.run_id WHERE p.run_id IN :ids", ids=chunk)
        else:
            rows = src.query(
                "SELECT ru.id AS run_id, ru.sweep, ru.experiment, ru.workload, ru.site, ru.system, ru.devices, "
                f"ru.precision, ru.strategy, ru.script_hash, ru.run_dir{text_columns} FROM runs ru WHERE ru.id IN :ids",
                ids=chunk)
        for row in rows:
            row.setdefault("attempt", 0)
            current = found.get(row["run_id"])
            if current is None or _rank(row) > _rank(current):
                found[row["run_id"]] = row
    return found


def _rank(row: dict[str, Any]) -> tuple[int, int]:
    return (row.get("status") in (AttemptState.COMPLETED, AttemptState.FAILED), row.get("attempt") or 0)


def sweep_files(src: Source, hashes: Iterable[str | None]) -> list[dict[str, Any]]:
    wanted = sorted({h for h in hashes if h})
    if not wanted:
        return []
    rows = src.query("SELECT name, path, content_hash, content FROM sweeps WHERE content_hash IN :hashes "
                     "ORDER BY name", hashes=wanted)
    return list({r["content_hash"]: r for r in rows}.values())


def tooltip(p: dict[str, Any]) -> str:
    where = p.get("site") or ""
    if p.get("system"):
        where += f":{p['system']}"
    strategy = f" {p['strategy']}" if p.get("strategy") else ""
    return (f"run {p['run_id']}: {p.get('sweep')} / {p.get('experiment')}, {p.get('workload')} "
            f"{p.get('precision')}{strategy} {p.get('devices')}dev on {where} (click: provenance)")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _attr_value(value: Any) -> str:
    """A number written in full (repr: reads back as the same double), anything else as text."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "j2"]),
                      trim_blocks=False, lstrip_blocks=False)
    env.filters["cell"] = _cell
    env.filters["attr_value"] = _attr_value
    env.tests["number"] = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    return env


def render_page(figures: list[RenderedFigure], skipped: list[Skip], runs: dict[str, dict[str, Any]],
                sweeps: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    template = environment().get_template("report.html.j2")
    ordered = [runs[k] for k in sorted(runs)]
    return template.render(figures=figures, skipped=skipped, provenance=ordered, sweep_files=sweeps, meta=meta)
