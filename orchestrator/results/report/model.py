"""What a figure of the report is made of, independent of how it is drawn.

A figure is panels of series of points plus the table of the numbers it shows. Every
point names the run whose provenance it leads to; the drawing (``draw.py``) turns that
into a link, the page (``page.py``) into an anchor in its provenance table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# Limits that keep a figure readable and a report of 100,000 results small and fast. What a
# limit leaves out is said in the figure's notes; the views keep every row.
MAX_PANELS = 6        # panels of one figure (one per workload and metric, per mode, ...)
MAX_CATEGORIES = 12   # bar groups of one panel
MAX_SERIES = 8        # lines or colours of one panel
MAX_POINTS = 500      # marks of a per-run figure; beyond it every k-th run (by run id) is kept
MAX_TABLE_ROWS = 300  # rows of a figure's data table


@dataclass
class Point:
    """One mark: ``x`` is a number, or a category for bar and strip panels."""

    x: float | str
    y: float
    run_id: str | None
    lo: float | None = None  # error bar ends (e.g. min and max over repeats)
    hi: float | None = None


@dataclass
class Series:
    label: str
    points: list[Point]
    marker: str = "o"
    joined: bool = True  # lines panels: marks joined in x order (False: marks alone)


@dataclass
class RefLine:
    """A line the points are read against: horizontal at ``y``, or through ``xs``/``ys``."""

    label: str
    y: float | None = None
    xs: list[float] | None = None
    ys: list[float] | None = None
    style: str = "--"


@dataclass
class Panel:
    title: str
    xlabel: str
    ylabel: str
    # bars: categorical x, one bar per point; strip: categorical x, one mark per point;
    # lines: numeric x, marks joined per series.
    kind: Literal["bars", "strip", "lines"]
    series: list[Series]
    refs: list[RefLine] = field(default_factory=list)
    xlog: int | None = None  # log base of the x axis (None: linear)
    ylog: int | None = None
    categories: list[str] | None = None  # order of the categorical x axis
    xbytes: bool = False  # x is a size in bytes (ticks in KiB, MiB, ...)


@dataclass
class Table:
    """The numbers a figure shows, one row each; ``run_id`` (when present) links to provenance.
    ``attrs`` names the columns also written as data attributes (full precision) on the row."""

    columns: list[str]
    rows: list[dict[str, Any]]
    attrs: list[str] = field(default_factory=list)
    truncated: int = 0  # rows left out by MAX_TABLE_ROWS


@dataclass
class FigureData:
    key: str     # stable name: the anchor in the page and the file name under figures/
    title: str
    caption: str  # what is plotted, from which view, by which definition
    panels: list[Panel]
    table: Table
    notes: list[str] = field(default_factory=list)  # what a limit left out, what is missing

    def run_ids(self) -> set[str]:
        ids = {p.run_id for panel in self.panels for s in panel.series for p in s.points if p.run_id}
        ids.update(str(r["run_id"]) for r in self.table.rows if r.get("run_id"))
        return ids


@dataclass
class Skip:
    """A figure not drawn, and why (no data for it, or no view for it in this database)."""

    key: str
    title: str
    reason: str
