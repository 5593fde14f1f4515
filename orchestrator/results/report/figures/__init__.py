"""One builder per figure of the studies, each reading its view with SQL.

A builder returns a ``FigureData`` or a ``Skip`` saying why the figure is not drawn: no
rows for it (a sweep with only GEMMs gets the primitive figures and no scaling curve),
or no view for it in this database. The numbers plotted are the views' columns as they
come (mean over repeats from ``repeat_spread``, speedup and efficiency from ``scaling``,
prices from ``cost``...); builders select, group and order rows, never recompute a figure
the views define. Where a point stands for several runs (repeats), it links to the first
run by id and the table says how many there are.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.results.report.curves import loss_curve
from orchestrator.results.report.figures.checks import cost, failures, predictions, references
from orchestrator.results.report.figures.inference import inference, serving
from orchestrator.results.report.figures.runs import collectives, primitives, strategies
from orchestrator.results.report.figures.throughput import (
    grad_accumulation,
    scaling,
    scaling_inference,
    sequence_length,
    summary,
    throughput_by_system,
)
from orchestrator.results.report.model import FigureData, Skip
from orchestrator.results.report.source import Source

Builder = Callable[[Source], "FigureData | Skip"]

# In the page's order, each with the name of its anchor and files (a Skip says it too).
BUILDERS: dict[str, Builder] = {
    "summary": summary, "throughput": throughput_by_system, "scaling": scaling,
    "scaling-inference": scaling_inference, "strategies": strategies, "seq_len": sequence_length,
    "grad_accum": grad_accumulation, "primitives": primitives, "collectives": collectives, "inference": inference,
    "serving": serving, "loss_curve": loss_curve, "predictions": predictions, "references": references,
    "cost": cost, "failures": failures}
