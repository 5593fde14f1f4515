"""Per-step series a training workload writes beside its figures (``series`` of the metrics file).

A series keeps the value of every ``every``-th optimiser step (steps counted from 1, warm-up
included), ``every`` chosen so that a run keeps at most ``MAX_POINTS`` of them, whatever its
length: the file stays small (1,000 points are about 30 KB). The values are held on the device
as the steps return them and read once the timed steps are over, so recording adds no
host-device synchronisation to a timed step.

In the file: ``"series": {"loss": {"every": k, "steps": [k, 2k, ...], "values": [...]}}``
(``orchestrator/results/metrics_schema.py`` validates it, ingest stores it in ``metric_series``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

MAX_POINTS = 1000


def stride(total_steps: int, max_points: int = MAX_POINTS) -> int:
    """The step interval that keeps at most ``max_points`` of ``total_steps`` steps (at least 1)."""
    return max(1, math.ceil(max(total_steps, 1) / max_points))


class StepSeries:
    """Values of every ``every``-th step: ``offer(step, value)`` after each step, ``read()`` at the end."""

    def __init__(self, total_steps: int, max_points: int = MAX_POINTS) -> None:
        self.every = stride(total_steps, max_points)
        self.max_points = max_points
        self._steps: list[int] = []
        self._held: list[Any] = []

    def offer(self, step: int, value: Any) -> None:
        if step % self.every == 0 and len(self._steps) < self.max_points:
            self._steps.append(step)
            self._held.append(value)

    def read(self, to_float: Callable[[Any], float]) -> dict[str, Any]:
        """The series as the file holds it; ``to_float`` reads one held value (may be collective:
        every rank calls it for the same steps in the same order). A value that is not a finite
        number (a diverged loss) is left out with its step."""
        steps: list[int] = []
        values: list[float] = []
        for step, held in zip(self._steps, self._held):
            value = float(to_float(held))
            if math.isfinite(value):
                steps.append(step)
                values.append(value)
        return {"every": self.every, "steps": steps, "values": values}
