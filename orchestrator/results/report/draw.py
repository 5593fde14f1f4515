"""Drawing a figure with matplotlib (Agg, no display), and its SVG for the page.

Every mark that stands for a run carries a link to ``#run-<id>`` (matplotlib writes an
artist's ``set_url``/``set_urls`` as ``<a>`` around it in SVG); the page has an anchor of
that name in its provenance table. The SVG written into the page gets its ids prefixed
per figure (several SVGs share one document, and matplotlib's ids repeat across them)
and a tooltip per linked mark.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.results.report.model import FigureData, Panel

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RC: dict[str, Any] = {
    "svg.fonttype": "none",      # text stays text: smaller files, editable in a paper
    "svg.hashsalt": "orch",      # the same data gives the same SVG
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 7,
    # Titles, labels and legends hold what users wrote (a sweep's tag, names): drawn as written,
    # never read as math text (`$...$`), which raised on a stray `$` or `\frac{` (issue 53).
    "text.parse_math": False,
}


def run_url(run_id: str) -> str:
    return f"#run-{run_id}"


def _colours(labels: Sequence[str]) -> dict[str, object]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _drawable(panel: Panel) -> None:
    """Drop marks without a finite value (a NULL from a view) or off a log axis."""
    for series in panel.series:
        series.points = [p for p in series.points if _finite(p.y) and (not panel.ylog or p.y > 0)
                         and (panel.kind != "lines" or (_finite(p.x) and (not panel.xlog or float(p.x) > 0)))]


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def render(data: FigureData) -> "Figure":
    """The matplotlib figure of ``data``: its panels in a grid of up to two columns, one legend."""
    import matplotlib

    for panel in data.panels:
        _drawable(panel)

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    panels = data.panels
    cols = 1 if len(panels) == 1 else 2
    rows = (len(panels) + cols - 1) // cols
    labels = list(dict.fromkeys(s.label for p in panels for s in p.series))
    colours = _colours(labels)
    columns, wrapped = _legend_layout(labels, 8.0 if cols == 1 else 10.0)
    lines_per_row = [max(wrapped[name].count("\n") + 1 for name in labels[i:i + columns])
                     for i in range(0, len(labels), columns)]
    legend_rows = sum(lines_per_row) + 1
    with matplotlib.rc_context(RC):  # type: ignore[arg-type]  # its stubs type the keys as a Literal of every rcParam
        figure = Figure(figsize=(8.0 if cols == 1 else 10.0, 3.4 * rows + 0.18 * legend_rows), layout="constrained")
        axes = figure.subplots(rows, cols, squeeze=False).ravel()
        for ax, panel in zip(axes, panels):
            _panel(ax, panel, colours)
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        handles, names = [], []
        for ax in axes[:len(panels)]:
            for handle, name in zip(*ax.get_legend_handles_labels()):
                if name not in names:
                    handles.append(handle)
                    names.append(name)
        if handles:
            figure.legend(handles, [wrapped.get(n, n) for n in names], loc="outside lower center",
                          ncols=min(columns, len(names)), frameon=False)
        _lay_out(figure)
    return figure


# Characters of legend text that fit a figure inch at the legend's font size (about 14 at 7 pt,
# less each entry's marker and gap): a label is wrapped to its column's share of the width.
LEGEND_CHARS_PER_INCH = 10


def _legend_layout(labels: Sequence[str], width_in: float) -> tuple[int, dict[str, str]]:
    """How many legend columns, and each label wrapped to fit its column: long labels (a system,
    precision and configuration) were cut at both edges of the figure (issue 27)."""
    longest = max((len(label) for label in labels), default=0)
    budget = int(width_in * LEGEND_CHARS_PER_INCH)
    columns = next((n for n in (3, 2) if longest <= budget // n), 1)
    width = max(12, budget // columns)
    return columns, {label: textwrap.fill(label, width, break_long_words=True) for label in labels}


def _lay_out(figure: "Figure") -> None:
    """Run the constrained layout once, then drop the engine: the SVG and the PNG are drawn
    with this layout. With the engine left on, every savefig makes a trial draw of all
    artists first (to lay out), which doubled the drawing time. The text is measured as the
    SVG measures it (72 dpi), so the layout is the one savefig(format="svg") would make."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG, RendererSVG

    class Measure(FigureCanvasSVG):
        def get_renderer(self) -> RendererSVG:
            width, height = self.figure.get_size_inches()
            return RendererSVG(width * 72, height * 72, io.StringIO(), image_dpi=72)

    engine = figure.get_layout_engine()
    if engine is not None:
        Measure(figure)
        dpi = figure.dpi
        figure.dpi = 72
        try:
            engine.execute(figure)
        finally:
            figure.dpi = dpi
    figure.set_layout_engine(None)


def _panel(ax, panel: Panel, colours: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    ax.set_title(panel.title)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    if panel.kind in ("bars", "strip"):
        _categorical(ax, panel, colours)
    else:
        for series in panel.series:
            colour = colours[series.label]
            xs = [float(p.x) for p in series.points]
            ys = [p.y for p in series.points]
            if series.joined and len(xs) > 1:
                ax.plot(xs, ys, "-", color=colour, linewidth=1.2, alpha=0.8)
            marks = ax.scatter(xs, ys, color=colour, marker=series.marker, s=22, label=series.label, zorder=3)
            marks.set_urls([run_url(p.run_id) if p.run_id else None for p in series.points])
            _whiskers(ax, xs, series.points, colour)
        _numeric_x(ax, panel)
    for ref in panel.refs:
        if ref.y is not None:
            ax.axhline(ref.y, color="0.35", linestyle=ref.style, linewidth=1, label=ref.label, zorder=1)
        elif ref.xs and ref.ys:
            ax.plot(ref.xs, ref.ys, color="0.35", linestyle=ref.style, linewidth=1, label=ref.label, zorder=1)
    if panel.ylog:
        ax.set_yscale("log", base=panel.ylog)
    elif all(p.y >= 0 for s in panel.series for p in s.points):
        ax.set_ylim(0, ax.get_ylim()[1] * 1.04)


def _categorical(ax, panel: Panel, colours: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    """Bars or marks grouped by category; the series present in a category share its width."""
    categories = panel.categories or list(dict.fromkeys(str(p.x) for s in panel.series for p in s.points))
    position = {c: i for i, c in enumerate(categories)}
    present: dict[str, list[str]] = {c: [] for c in categories}
    for series in panel.series:
        for point in series.points:
            if point.x in present and series.label not in present[point.x]:  # type: ignore[index]
                present[point.x].append(series.label)  # type: ignore[index]
    for series in panel.series:
        points = [p for p in series.points if p.x in position]
        if not points:
            continue
        xs = []
        for p in points:
            here = present[p.x]  # type: ignore[index]
            width = 0.8 / len(here)
            xs.append(position[p.x] + (here.index(series.label) - (len(here) - 1) / 2) * width)  # type: ignore[index]
        ys = [p.y for p in points]
        colour = colours[series.label]
        if panel.kind == "bars":
            widths = [0.76 / len(present[p.x]) for p in points]  # type: ignore[index]
            bars = ax.bar(xs, ys, widths, color=colour, label=series.label)
            for bar, point in zip(bars, points):
                if point.run_id:
                    bar.set_url(run_url(point.run_id))
        else:
            marks = ax.scatter(xs, ys, color=colour, marker=series.marker, s=22, label=series.label, zorder=3)
            marks.set_urls([run_url(p.run_id) if p.run_id else None for p in points])
        _whiskers(ax, xs, points, colour)
    ax.set_xticks(range(len(categories)))
    # Side by side while they fit (wrapped at 22 characters), else slanted on one line.
    slanted = len(categories) * min(22, max((len(str(c)) for c in categories), default=0)) > 80
    ax.set_xticklabels([textwrap.shorten(str(c), 48, placeholder="…") if slanted else textwrap.fill(str(c), 22)
                        for c in categories], rotation=30 if slanted else 0, ha="right" if slanted else "center",
                       rotation_mode="anchor" if slanted else "default", fontsize=6.5)
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.grid(axis="x", visible=False)


def _numeric_x(ax, panel: Panel) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    xs = sorted({float(p.x) for s in panel.series for p in s.points})
    if panel.xlog:
        ax.set_xscale("log", base=panel.xlog)
        if len(xs) == 1:  # one value: a little room either side
            ax.set_xlim(xs[0] / 2, xs[0] * 2)
    whole = all(x == int(x) for x in xs)
    if (panel.xlog == 2 or (not panel.xlog and whole)) and 0 < len(xs) <= 12:
        # devices, sizes, sequence lengths: ticks at the values run, written plainly
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _bytes(v) if panel.xbytes else f"{v:.4g}"))
    elif panel.xbytes:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _bytes(v)))


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value:g} B"


def _whiskers(ax, xs: Sequence[float], points, colour: object) -> None:  # type: ignore[no-untyped-def]
    spans = [(x, p) for x, p in zip(xs, points) if p.lo is not None and p.hi is not None]
    if spans:
        ax.errorbar([x for x, _ in spans], [p.y for _, p in spans],
                    yerr=[[max(0.0, p.y - p.lo) for _, p in spans], [max(0.0, p.hi - p.y) for _, p in spans]],
                    fmt="none", ecolor="0.2", elinewidth=0.8, capsize=2, zorder=4)


def svg_text(figure: "Figure") -> str:
    """The figure as a standalone SVG document (for papers)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": RC["svg.hashsalt"]}):  # read when saving, not when drawing
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def png_bytes(figure: "Figure", dpi: int = 150) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|xlink:href="#|href="#)([^")]+)')
_RUN_LINK = re.compile(r'<a xlink:href="#run-([^"]+)" target="_blank">')


def inline_svg(document: str, prefix: str, tooltips: dict[str, str], title: str) -> str:
    """``document`` made fit to sit in an HTML page beside other SVGs: no XML prolog, ids and
    references to them prefixed with ``prefix``, in-page links opening in place with a tooltip,
    and scaling to the page's width."""
    start = document.index("<svg")
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", document[start:], flags=re.S)
    ids = set(_ID.findall(svg))
    svg = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    svg = _REF.sub(lambda m: m.group(1) + (f"{prefix}-{m.group(2)}" if m.group(2) in ids else m.group(2)), svg)

    def link(match: re.Match[str]) -> str:
        run_id = match.group(1)
        tip = tooltips.get(run_id, f"run {run_id}")
        return f'<a xlink:href="#run-{run_id}" href="#run-{run_id}" class="run-link"><title>{_escape(tip)}</title>'

    svg = _RUN_LINK.sub(link, svg)
    svg = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"',
                 lambda m: f'<svg {m.group(1)}class="figure-svg" role="img" aria-label="{_escape(title)}" '
                           'preserveAspectRatio="xMidYMin meet"', svg, count=1)
    return svg


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
