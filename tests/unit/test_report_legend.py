"""The report's legends stay inside their figure however long the labels (issue 27: a system,
precision and configuration label was cut off at both edges of the figure)."""

from __future__ import annotations

import pytest

from orchestrator.results.report import draw
from orchestrator.results.report.model import FigureData, Panel, Point, Series, Table

LONG = [
    "perlmutter:gpu (NVIDIA A100-SXM4-40GB) · bf16 · 8 devices ddp batch 16 seq 2048 model=gpt2-xl",
    "polaris (NVIDIA A100-SXM4-40GB) · fp32 · 8 devices fsdp-full batch 16 seq 2048 model=gpt2-xl",
    "baskerville (NVIDIA A100-SXM4-80GB) · bf16 · 4 devices zero3 batch 8 seq 1024 model=gpt2-medium grad_accum=4",
    "local (host-cpu) · fp32",
    "x" * 150,  # no space to break at
]


@pytest.mark.parametrize("labels", [LONG, LONG[:2], [LONG[4]], ["a", "b", "c", "d"]])
@pytest.mark.parametrize("panels", [1, 2])
def test_a_legend_with_long_labels_stays_inside_the_figure(labels: list[str], panels: int) -> None:
    series = [Series(label, [Point(i, float(i + 1), None), Point(i + 1, float(i + 2), None)])
              for i, label in enumerate(labels)]
    data = FigureData("t", "t", "", [Panel(f"p{n}", "x", "y", "lines", series) for n in range(panels)],
                      Table([], []))
    figure = draw.render(data)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()
    box, inside = figure.legends[0].get_window_extent(renderer), figure.bbox
    assert box.x0 >= inside.x0 - 1 and box.x1 <= inside.x1 + 1, (box, inside)
    assert box.y0 >= inside.y0 - 1 and box.y1 <= inside.y1 + 1, (box, inside)
    for ax in figure.axes:  # the legend, below the panels, covers none of them
        assert ax.get_window_extent(renderer).y0 >= box.y1 - 1
    shown = [text.get_text() for text in figure.legends[0].get_texts()]  # wrapped, nothing dropped
    assert "".join(shown).replace("\n", "").replace(" ", "") == "".join(labels).replace(" ", "")
